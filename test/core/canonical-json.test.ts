import { expect } from 'chai';
import canonicalize from 'canonicalize';
import { canonicalJson } from '../../core/crypto.ts';

/** A double from its IEEE 754 bits, as RFC 8785's Appendix B lists them. */
const double = (hex: string): number => Buffer.from(hex, 'hex').readDoubleBE(0);

/** A small deterministic generator (mulberry32), so a failure names a seed that reproduces it. */
function random(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state + 0x6d2b79f5) | 0;
    let t = Math.imul(state ^ (state >>> 15), 1 | state);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Characters that stress sorting and escaping: controls, quotes, non-ASCII, astral pairs, U+FB33. */
const ALPHABET = [
  'a',
  'Z',
  '1',
  '10',
  '"',
  '\\',
  '\n',
  '\u0001',
  '\u007f',
  'é',
  '€',
  '\ufb33',
  '😀',
  '𝄞',
  ' ',
  '/',
];

function randomValue(next: () => number, depth: number): unknown {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)] as T;
  const text = () => Array.from({ length: Math.floor(next() * 5) }, () => pick(ALPHABET)).join('');
  const kind = depth > 3 ? Math.floor(next() * 4) : Math.floor(next() * 6);
  switch (kind) {
    case 0:
      return text();
    case 1:
      return pick([
        0,
        -0,
        1,
        -1,
        0.1,
        1e21,
        1e-7,
        123456789012345680000,
        Number.MAX_SAFE_INTEGER,
        Number.MIN_VALUE,
        (next() - 0.5) * 10 ** Math.floor(next() * 40 - 20),
      ]);
    case 2:
      return pick([true, false, null]);
    case 3:
      return Math.floor(next() * 1e6);
    case 4:
      return Array.from({ length: Math.floor(next() * 4) }, () => randomValue(next, depth + 1));
    default:
      return Object.fromEntries(
        Array.from({ length: Math.floor(next() * 5) }, () => [text(), randomValue(next, depth + 1)]),
      );
  }
}

describe('canonicalJson (RFC 8785)', () => {
  it('gives the RFC example of §3.2.2 (literals, numbers, string escapes)', () => {
    const input = JSON.parse(
      '{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],' +
        ' "string": "\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/", "literals": [null, true, false]}',
    ) as unknown;
    expect(canonicalJson(input)).to.equal(
      '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],' +
        '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}',
    );
  });

  it('sorts members by UTF-16 code units, as in the RFC example of §3.2.3', () => {
    const input = {
      '€': 'Euro Sign',
      '\r': 'Carriage Return',
      '\ufb33': 'Hebrew Letter Dalet With Dagesh',
      '1': 'One',
      '😀': 'Emoji: Grinning Face',
      '\u0080': 'Control',
      ö: 'Latin Small Letter O With Diaeresis',
    };
    const order = Object.keys(JSON.parse(canonicalJson(input)) as object);
    // JSON.parse puts the integer-like "1" first again; the text's order is what counts.
    const textOrder = [...canonicalJson(input).matchAll(/"((?:[^"\\]|\\.)*)":/g)].map(
      (match) => JSON.parse(`"${match[1] as string}"`) as string,
    );
    expect(textOrder).to.deep.equal(['\r', '1', '\u0080', 'ö', '€', '😀', '\ufb33']);
    expect(order).to.have.length(7);
  });

  it('writes the numbers of the RFC Appendix B as it lists them', () => {
    const vectors: [string, string][] = [
      ['0000000000000000', '0'],
      ['8000000000000000', '0'],
      ['0000000000000001', '5e-324'],
      ['8000000000000001', '-5e-324'],
      ['7fefffffffffffff', '1.7976931348623157e+308'],
      ['ffefffffffffffff', '-1.7976931348623157e+308'],
      ['4340000000000000', '9007199254740992'],
      ['c340000000000000', '-9007199254740992'],
      ['4430000000000000', '295147905179352830000'],
      ['44b52d02c7e14af5', '9.999999999999997e+22'],
      ['44b52d02c7e14af6', '1e+23'],
      ['44b52d02c7e14af7', '1.0000000000000001e+23'],
      ['444b1ae4d6e2ef4e', '999999999999999700000'],
      ['444b1ae4d6e2ef4f', '999999999999999900000'],
      ['444b1ae4d6e2ef50', '1e+21'],
      ['3eb0c6f7a0b5ed8c', '9.999999999999997e-7'],
      ['3eb0c6f7a0b5ed8d', '0.000001'],
      ['41b3de4355555553', '333333333.3333332'],
      ['41b3de4355555554', '333333333.33333325'],
      ['41b3de4355555555', '333333333.3333333'],
      ['41b3de4355555556', '333333333.3333334'],
      ['41b3de4355555557', '333333333.33333343'],
      ['becbf647612f3696', '-0.0000033333333333333333'],
      ['43143ff3c1cb0959', '1424953923781206.2'],
    ];
    for (const [bits, text] of vectors) expect(canonicalJson(double(bits)), bits).to.equal(text);
  });

  it('refuses what RFC 8785 cannot canonicalize: NaN, infinities, lone surrogates, cycles, functions, bigints', () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    for (const value of [
      Number.NaN,
      double('7ff0000000000000'),
      -Infinity,
      { text: 'a\ud800b' },
      ['\udc00'],
      'x\ud83d',
      cyclic,
      { run: () => 1 },
      10n,
    ]) {
      expect(() => canonicalJson(value), String(value)).to.throw(Error);
    }
  });

  it('keeps surrogate pairs and text that only looks like an escaped surrogate', () => {
    expect(canonicalJson({ emoji: '😀' })).to.equal('{"emoji":"😀"}');
    expect(canonicalJson({ text: '\\ud800' })).to.equal('{"text":"\\\\ud800"}');
    expect(canonicalJson(['\\\ud83d\ude00'])).to.equal('["\\\\😀"]');
  });

  it('agrees with the canonicalize library on 2000 random JSON values', () => {
    for (let seed = 1; seed <= 2000; seed += 1) {
      const value = randomValue(random(seed), 0);
      expect(canonicalJson(value), `seed ${seed}`).to.equal(canonicalize(value));
    }
  });
});
