import { createHmac, randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { HmacSha256Key } from '../../core/crypto.ts';

describe('HmacSha256Key', () => {
  // RFC 4231 §4: the HMAC-SHA-256 results of the test cases whose data is text (3 and 4 MAC bytes a
  // string cannot hold; 5 is a truncated MAC).
  const cases: { name: string; key: Buffer; data: string; mac: string }[] = [
    {
      name: 'case 1',
      key: Buffer.alloc(20, 0x0b),
      data: 'Hi There',
      mac: 'b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7',
    },
    {
      name: 'case 2 (a key shorter than the output)',
      key: Buffer.from('Jefe'),
      data: 'what do ya want for nothing?',
      mac: '5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843',
    },
    {
      name: 'case 6 (a key larger than the block, hashed first)',
      key: Buffer.alloc(131, 0xaa),
      data: 'Test Using Larger Than Block-Size Key - Hash Key First',
      mac: '60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54',
    },
    {
      name: 'case 7 (a large key and a large message)',
      key: Buffer.alloc(131, 0xaa),
      data:
        'This is a test using a larger than block-size key and a larger than block-size data. ' +
        'The key needs to be hashed before being used by the HMAC algorithm.',
      mac: '9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2',
    },
  ];

  for (const { name, key, data, mac } of cases) {
    it(`gives RFC 4231's result for ${name}`, () => {
      expect(new HmacSha256Key(key).mac(data, 'hex')).to.equal(mac);
    });
  }

  it('agrees with createHmac on many messages under one key, whatever their length and characters', () => {
    const key = randomBytes(32);
    const hmac = new HmacSha256Key(key);
    const pieces = ['a', 'é', '€', '😀', '\u0000', '"', '\ud800', 'x'.repeat(70)];
    for (let length = 0; length < 400; length += 7) {
      const text = Array.from({ length }, (_, index) => pieces[(index * 5 + length) % pieces.length]).join(
        '',
      );
      for (const encoding of ['hex', 'base64url'] as const) {
        expect(hmac.mac(text, encoding), `${length}/${encoding}`).to.equal(
          createHmac('sha256', key).update(text, 'utf8').digest(encoding),
        );
      }
    }
    // A message larger than the room made so far, then a short one again.
    const long = '漢'.repeat(50_000);
    expect(hmac.mac(long, 'hex')).to.equal(createHmac('sha256', key).update(long).digest('hex'));
    expect(hmac.mac('short', 'hex')).to.equal(createHmac('sha256', key).update('short').digest('hex'));
  });

  it('keeps its own copy of the key: changing the caller’s buffer changes nothing', () => {
    const key = randomBytes(32);
    const hmac = new HmacSha256Key(key);
    const before = hmac.mac('message', 'hex');
    key.fill(0);
    expect(hmac.mac('message', 'hex')).to.equal(before);
  });
});
