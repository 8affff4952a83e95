import { execFile } from 'node:child_process';
import { once } from 'node:events';
import { fstatSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { configSchema } from '../../services/config.ts';
import {
  createLogger,
  logDestination,
  logDestinationIn,
  logFormat,
  logWritten,
  SecretRegistry,
} from '../../core/log.ts';
import { openKernel } from '../../services/kernel.ts';

const logModule = fileURLToPath(new URL('../../core/log.ts', import.meta.url));

describe('log format', () => {
  it('auto: readable lines at a terminal in development, JSON in production or without a terminal', () => {
    expect(logFormat('auto', { mode: 'development', terminal: true })).to.equal('pretty');
    expect(logFormat('auto', { mode: 'development', terminal: false })).to.equal('json');
    expect(logFormat('auto', { mode: 'production', terminal: true })).to.equal('json');
  });

  it('json and pretty are kept whatever the terminal and mode (LOG_FORMAT forces one)', () => {
    expect(logFormat('json', { mode: 'development', terminal: true })).to.equal('json');
    expect(logFormat('pretty', { mode: 'production', terminal: false })).to.equal('pretty');
  });

  it('pretty: pino-pretty (required when a pretty log is made) writes one readable line, secrets scrubbed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sigil-pretty-'));
    const file = join(dir, 'log');
    const fd = openSync(file, 'w');
    try {
      const secrets = new SecretRegistry();
      secrets.add('sk-pretty-secret-value-0123456789');
      const destination = logDestinationIn('pretty', fd);
      const logger = createLogger({ level: 'info', secrets, destination });
      logger.info({ key: 'sk-pretty-secret-value-0123456789' }, 'pretty line');
      // Ended, it has written everything and closed the file once it closes: its sonic-boom owns the
      // descriptor and closes it itself (closed here too, the number could be another test's file by
      // then, which sonic-boom's close would take: EBADF in the next test's writes).
      const closed = once(destination as unknown as Writable, 'close');
      (destination as unknown as Writable).end();
      await closed;
      expect(() => fstatSync(fd), 'the destination closed its descriptor').to.throw();
      const text = readFileSync(file, 'utf8');
      expect(text).to.match(/INFO.*pretty line/);
      expect(text).not.to.include('sk-pretty-secret-value-0123456789');
      expect(() => JSON.parse(text)).to.throw(); // a readable line, not JSON
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

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

  describe('the batched file destination', () => {
    let dir: string;
    beforeEach(() => {
      dir = mkdtempSync(join(tmpdir(), 'sigil-log-'));
    });
    afterEach(() => rmSync(dir, { recursive: true, force: true }));
    const linesIn = (file: string) =>
      readFileSync(file, 'utf8')
        .split('\n')
        .filter((line) => line !== '')
        .map((line) => (JSON.parse(line) as { msg: string }).msg);

    it('writes every line, in order, once flushed', async () => {
      const file = join(dir, 'out.log');
      const logger = createLogger({ destination: logDestination(file) });
      // More than one batch, so a hand-over happens while the previous write may be under way.
      for (let index = 0; index < 500; index += 1) logger.info(`line ${index} ${'x'.repeat(60)}`);
      await new Promise<void>((resolve, reject) => logger.flush((err) => (err ? reject(err) : resolve())));
      const written = linesIn(file);
      expect(written).to.have.length(500);
      expect(written[0]).to.match(/^line 0 /);
      expect(written[499]).to.match(/^line 499 /);
    });

    it('logWritten resolves once a partial batch is in the file (sigil up prints its ready line after it)', async () => {
      const file = join(dir, 'out.log');
      const destination = logDestination(file);
      const logger = createLogger({ destination });
      logger.info('warmup 3/3: everything verified');
      await logWritten(destination);
      expect(linesIn(file)).to.deep.equal(['warmup 3/3: everything verified']);
      destination.close();
    });

    it('writes a partial batch within its flush period, unasked', async () => {
      const file = join(dir, 'out.log');
      const logger = createLogger({ destination: logDestination(file) });
      await new Promise((resolve) => setTimeout(resolve, 50)); // the file is open
      logger.info('lonely line');
      expect(readFileSync(file, 'utf8')).to.equal('');
      await new Promise((resolve) => setTimeout(resolve, 600));
      expect(linesIn(file)).to.deep.equal(['lonely line']);
    });

    it('writes the lines still waiting when the process exits at once', async () => {
      const file = join(dir, 'out.log');
      const script = [
        `import { createLogger, logDestination } from ${JSON.stringify(logModule)};`,
        `const logger = createLogger({ destination: logDestination(${JSON.stringify(file)}) });`,
        'setTimeout(() => {',
        "  for (let i = 0; i < 3; i += 1) logger.info('before exit ' + i);",
        '  process.exit(3);',
        '}, 100);',
      ].join('\n');
      const run = promisify(execFile)(process.execPath, [
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        script,
      ]);
      const failed = await run.then(
        () => undefined,
        (err: { code?: number }) => err,
      );
      expect(failed?.code).to.equal(3);
      expect(linesIn(file)).to.deep.equal(['before exit 0', 'before exit 1', 'before exit 2']);
    });

    it('importing the log module leaves the process as it was: no exit hook until a destination is made', async () => {
      const script = [
        "const before = process.listenerCount('exit');",
        `const { logDestination } = await import(${JSON.stringify(logModule)});`,
        "const imported = process.listenerCount('exit') - before;",
        'const destination = logDestination(1);',
        "const made = process.listenerCount('exit') - before;",
        'destination.close();',
        "const closed = process.listenerCount('exit') - before;",
        // sonic-boom hooks the exit of its own as well; ours is the one closing takes away.
        'console.log(JSON.stringify({ imported, releasedOnClose: made - closed }));',
      ].join('\n');
      const { stdout } = await promisify(execFile)(process.execPath, [
        '--import',
        'tsx',
        '--input-type=module',
        '-e',
        script,
      ]);
      expect(JSON.parse(stdout)).to.deep.equal({ imported: 0, releasedOnClose: 1 });
    });

    it('a closed destination hands over what waits and still writes later lines', async () => {
      const file = join(dir, 'out.log');
      const destination = logDestination(file);
      const logger = createLogger({ destination });
      logger.info('before close');
      destination.close();
      logger.info('after close');
      await new Promise<void>((resolve, reject) => logger.flush((err) => (err ? reject(err) : resolve())));
      expect(linesIn(file)).to.deep.equal(['before close', 'after close']);
    });

    it('a kernel closes the log destination it made (and its exit hook) when it closes', async () => {
      const hooks = process.listenerCount('exit');
      const config = configSchema.parse({
        database: { url: join(dir, 'sigil.db') },
        log: { level: 'silent' },
      });
      const kernel = await openKernel({ loaded: { config, file: undefined, envOverrides: [] } });
      expect(process.listenerCount('exit')).to.equal(hooks + 1);
      await kernel.close();
      expect(process.listenerCount('exit')).to.equal(hooks);
    });
  });
});
