import { Writable } from 'node:stream';
import { expect } from 'chai';
import { createLogger, SecretRegistry } from '../../core/log.ts';
import { encodingsOf, Redactor } from '../../core/redaction.ts';

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
});
