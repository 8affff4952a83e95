import { Writable } from 'node:stream';
import { expect } from 'chai';
import { createLogger, SecretRegistry } from '../../core/log.ts';

describe('logger', () => {
  const capture = () => {
    const lines: string[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(chunk.toString());
        done();
      },
    });
    return { lines, destination };
  };

  it('scrubs registered secret values from messages, fields and errors', () => {
    const canary = 'canary-7f3a9c2e-secret-value';
    const secrets = new SecretRegistry();
    secrets.add(canary);
    const { lines, destination } = capture();
    const logger = createLogger({ level: 'info', secrets, destination });
    logger.info(`connecting with ${canary}`);
    logger.info({ upstream: { note: `key=${canary}` } }, 'nested');
    logger.error({ err: new Error(`provider rejected ${canary}`) }, 'failed');
    const output = lines.join('');
    expect(lines).to.have.length(3);
    expect(output).not.to.include(canary);
    expect(output.match(/\[REDACTED\]/g)).to.have.length.greaterThanOrEqual(3);
  });

  it('censors credential fields whatever their value', () => {
    const { lines, destination } = capture();
    const logger = createLogger({ level: 'info', destination });
    logger.info(
      { req: { headers: { authorization: 'Bearer abc.def.ghi' } }, body: { apiKey: 'sk-live-123456' } },
      'in',
    );
    const output = lines.join('');
    expect(output).not.to.include('abc.def.ghi');
    expect(output).not.to.include('sk-live-123456');
  });

  it('ignores values too short to be secrets, so ordinary words survive', () => {
    const secrets = new SecretRegistry();
    secrets.add('ok');
    expect(secrets.scrub('ok then')).to.equal('ok then');
  });
});
