import { Writable } from 'node:stream';
import { expect } from 'chai';
import { createLogger, SecretRegistry } from '../../core/log.ts';
import { encodingsOf, Redactor } from '@sigil/plugin-api';

describe('redaction', () => {
  const secret = 'tok"en\\with\nnewline-é-0123456789';

  it('redacts a secret embedded at each byte alignment of a base64 or base64url stream, and hex in both cases', () => {
    const redactor = Redactor.of([secret]);
    for (const alphabet of ['base64', 'base64url'] as const) {
      for (const before of ['', 'x', 'xy']) {
        for (const after of ['', 'z', 'zz', 'zzz']) {
          const encoded = Buffer.from(`${before}${secret}${after}`).toString(alphabet);
          const redacted = redactor.text(`<${encoded}>`);
          expect(redacted, `${alphabet} after ${before.length} bytes`).to.include('[REDACTED]');
          // What is left: the brackets, at most 3 characters before (2 bytes and the one that mixes
          // their bits with the secret's) and 7 after (the mixed one, 3 bytes and the padding).
          expect(redacted.replace('[REDACTED]', '').length).to.be.at.most(2 + 3 + 7);
        }
      }
    }
    const hex = Buffer.from(secret).toString('hex');
    expect(redactor.text(`${hex}|${hex.toUpperCase()}`)).to.equal('[REDACTED]|[REDACTED]');
  });

  it('redacts the secret as common encoders escape it in JSON and percent-encode it', () => {
    const tricky = 'a/b<c>&d é"e!*~';
    const redactor = Redactor.of([tricky]);
    for (const [encoder, form] of [
      ['Python json.dumps', String.raw`a/b<c>&d \u00e9\"e!*~`],
      ['Java, upper-case escapes', String.raw`a/b<c>&d \u00E9\"e!*~`],
      ['Go encoding/json', String.raw`a/b\u003cc\u003e\u0026d é\"e!*~`],
      ['PHP json_encode', String.raw`a\/b<c>&d \u00e9\"e!*~`],
      ['Python quote_plus', 'a%2Fb%3Cc%3E%26d+%C3%A9%22e%21%2A~'],
      ["Python quote(safe='')", 'a%2Fb%3Cc%3E%26d%20%C3%A9%22e%21%2A~'],
      ['encodeURIComponent', encodeURIComponent(tricky)],
      ['form encoding', new URLSearchParams({ s: tricky }).toString().slice(2)],
      ['lower-case escapes', encodeURIComponent(tricky).toLowerCase()],
    ]) {
      expect(redactor.text(`<${form as string}>`), encoder).to.equal('<[REDACTED]>');
    }
  });

  it('keeps short derived forms out (they would match ordinary text), but always the raw secret', () => {
    expect(encodingsOf('ab')).to.deep.equal(['ab']);
    expect(Redactor.of(['abc']).text('xabcx')).to.equal('x[REDACTED]x');
    expect(Redactor.of(['']).empty).to.equal(true);
  });

  it('scrubs a process’s secrets from log lines only while it holds them, in every encoding', () => {
    const registry = new SecretRegistry();
    const lines: string[] = [];
    const logger = createLogger({
      level: 'info',
      secrets: registry,
      destination: new Writable({
        write(chunk: Buffer, _encoding, done) {
          lines.push(chunk.toString());
          done();
        },
      }),
    });
    const quoted = JSON.stringify({ token: secret });
    const release = registry.hold(Redactor.of([secret]));
    logger.info({ stderr: `${secret} ${quoted} ${encodeURIComponent(secret)}` }, 'held');
    release();
    logger.info({ stderr: secret }, 'released');
    const [held, released] = lines;
    expect(held).to.include('[REDACTED]').and.not.to.include('newline-é-0123456789');
    // Its process has ended: the list no longer grows with every secret the gateway ever ran with.
    expect(released).to.include('newline-é-0123456789');
    release(); // twice is harmless
  });

  it('redacts as well with the forms of many secrets at once (an index instead of one expression), in one scan', () => {
    const registry = new SecretRegistry();
    const values = Array.from(
      { length: 100 },
      (_, index) => `session-key-${index}-${'x'.repeat(index % 7)}"q`,
    );
    for (const value of values) registry.add(value);
    const release = registry.hold(Redactor.of([secret]));
    const text = values
      .map((value, index) =>
        index % 2 === 0 ? JSON.stringify({ value }) : Buffer.from(`a${value}`).toString('base64url'),
      )
      .join(' ');
    const scrubbed = registry.scrub(`${text} ${Buffer.from(secret).toString('hex')} the end`);
    expect(scrubbed.match(/\[REDACTED\]/g)).to.have.length(101);
    expect(scrubbed).to.match(/ the end$/);
    expect(scrubbed).not.to.include('session-key');
    release();
    expect(registry.scrub(Buffer.from(secret).toString('hex'))).to.equal(Buffer.from(secret).toString('hex'));
  });
});
