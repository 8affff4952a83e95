import { pino, type Logger as PinoLogger, type DestinationStream } from 'pino';
import { createRequire } from 'node:module';
import type * as PinoPrettyModule from 'pino-pretty';
import { Redactor } from '@sigil/plugin-api';

export type Logger = PinoLogger;

/** Log lines are mostly ordinary words: shorter secrets (and shorter encodings of them) are left alone. */
const MIN_LOGGED_SECRET_CHARS = 6;

/**
 * Secret values known to the process: config secrets for its life, and the secrets of a running MCP
 * server (or an unlocked session) only while it runs. Every log line passes through `scrub` before it
 * is written, so a secret that slips into a message, an error or a field is replaced, in every
 * encoding (core/redaction.ts), even where no redaction path foresaw it.
 */
export class SecretRegistry {
  /** Each value's forms, computed once (the union is rebuilt from them at each change). */
  private readonly values = new Map<string, Redactor>();
  private readonly held = new Set<Redactor>();
  /** Rebuilt at the first line after a change (a process starting or ending), not per line. */
  private redactor: Redactor | undefined = Redactor.none;

  add(value: string | undefined): void {
    if (value === undefined || value.length < MIN_LOGGED_SECRET_CHARS || this.values.has(value)) return;
    this.values.set(value, Redactor.of([value], MIN_LOGGED_SECRET_CHARS));
    this.redactor = undefined;
  }

  remove(value: string): void {
    if (this.values.delete(value)) this.redactor = undefined;
  }

  /** Scrubs the secrets of `redactor` (a running process's) from log lines until the returned release. */
  hold(redactor: Redactor): () => void {
    if (redactor.empty) return () => undefined;
    this.held.add(redactor);
    this.redactor = undefined;
    return () => {
      if (this.held.delete(redactor)) this.redactor = undefined;
    };
  }

  scrub(text: string): string {
    this.redactor ??= Redactor.union([...this.values.values(), ...this.held], MIN_LOGGED_SECRET_CHARS);
    return this.redactor.text(text);
  }
}

/** Field paths that always hold credentials, whatever their value. */
const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["payment-signature"]',
  'req.headers.signature',
  'headers.authorization',
  '*.password',
  '*.privateKey',
  '*.secret',
  '*.apiKey',
  '*.token',
];

export interface LoggerOptions {
  level?: string;
  name?: string;
  secrets?: SecretRegistry;
  /** Where lines go, e.g. `logDestination(2)`: whoever makes a destination closes it. */
  destination: DestinationStream;
}

type SonicBoom = ReturnType<typeof pino.destination>;

/**
 * A log destination its creator closes once nothing more should wait in it: what it holds is handed
 * over, later lines are written at once, and the process's exit no longer flushes it.
 */
export interface LogDestination extends DestinationStream {
  close(): void;
  /** Writes what it holds; `done` runs once it is written. */
  flush(done?: (err?: Error) => void): void;
}

const BATCH_CHARS = 16 * 1024;
const FLUSH_EVERY_MS = 250;

/**
 * Log lines gathered in an array and handed to sonic-boom 16 KB at a time (or every 250 ms), so a busy
 * service makes one write per batch instead of one per line (a write per request cost a busy service a
 * tenth of its CPU here: each wakes a thread of the pool). Batched here rather than with sonic-boom's
 * `minLength`, which appends each line to the pending string and then measures that string's UTF-8
 * length, flattening it: a copy of 8 KB per line on average, an eighth of a busy gateway's allocation
 * per tool call.
 *
 * Lines still waiting when the process exits are written synchronously (as sonic-boom does its own):
 * each destination hooks the process's exit when it is created and lets go of it when closed, so
 * importing this module changes nothing in the process.
 */
class LineBatches implements LogDestination {
  private lines: string[] = [];
  private chars = 0;
  private readonly timer: NodeJS.Timeout;
  private closed = false;

  constructor(private readonly sink: SonicBoom) {
    this.timer = setInterval(() => this.handOver(), FLUSH_EVERY_MS).unref();
    process.on('exit', this.flushAtExit);
  }

  write(line: string): void {
    this.lines.push(line);
    this.chars += line.length;
    if (this.closed || this.chars >= BATCH_CHARS) this.handOver();
  }

  /** pino's `logger.flush()`. */
  flush(done?: (err?: Error) => void): void {
    this.handOver();
    this.sink.flush(done);
  }

  flushSync(): void {
    this.handOver();
    this.sink.flushSync();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    process.removeListener('exit', this.flushAtExit);
    this.handOver();
  }

  private readonly flushAtExit = (): void => {
    try {
      this.flushSync();
    } catch {
      // A log file not open yet (the process ends at start-up): nothing can be written any more.
    }
  };

  private handOver(): void {
    if (this.lines.length === 0) return;
    const batch = this.lines.join('');
    this.lines = [];
    this.chars = 0;
    this.sink.write(batch);
  }
}

/** An asynchronous, batched log destination (a file path, or a file descriptor such as 2). */
export const logDestination = (dest: number | string): LogDestination =>
  // minLength 1: each batch is written at once, and sonic-boom's flush(done) waits for the write (it
  // calls back at once when minLength is 0).
  new LineBatches(pino.destination({ dest, sync: false, minLength: 1 }));

/** How log lines are written: JSON for whatever reads logs, or readable lines for a person. */
export type LogFormat = 'json' | 'pretty';

/**
 * The format of a setting (`log.format`): `auto` is pretty for a person at a terminal in development,
 * JSON everywhere else (a file, a pipe, a log collector, production mode).
 */
export function logFormat(
  setting: 'auto' | LogFormat,
  context: { mode: 'development' | 'production'; terminal: boolean },
): LogFormat {
  if (setting !== 'auto') return setting;
  return context.terminal && context.mode === 'development' ? 'pretty' : 'json';
}

/**
 * Where a process's log goes (a file descriptor, stderr by default) in `format`: pretty lines are
 * pino-pretty's, in this thread, so the secret scrubber still sees every line before it is written.
 */
export const logDestinationIn = (format: LogFormat, dest = 2): DestinationStream =>
  format === 'pretty'
    ? prettyLogs()({
        destination: dest,
        sync: false,
        singleLine: true,
        translateTime: 'SYS:HH:MM:ss',
        ignore: 'pid,hostname',
      })
    : logDestination(dest);

/**
 * pino-pretty (CommonJS), required where a pretty log is made: JSON logs, what services run with
 * outside a terminal, never load it (about 20 ms of start-up, issue 30).
 */
const prettyLogs = (): typeof PinoPrettyModule.PinoPretty =>
  (createRequire(import.meta.url)('pino-pretty') as typeof PinoPrettyModule).PinoPretty;

/**
 * Resolves once the lines a destination holds are written (at once where it cannot say), so that a
 * line printed on stdout afterwards follows them, as `sigil up`'s ready line must.
 */
export function logWritten(destination: DestinationStream): Promise<void> {
  const { flush } = destination as Partial<Pick<LogDestination, 'flush'>>;
  if (typeof flush !== 'function') return Promise.resolve();
  return new Promise((resolve) => flush.call(destination, () => resolve()));
}

export function createLogger(options: LoggerOptions): Logger {
  const secrets = options.secrets;
  return pino(
    {
      level: options.level ?? 'info',
      ...(options.name === undefined ? {} : { name: options.name }),
      redact: { paths: REDACT_PATHS, censor: '[REDACTED]' },
      hooks: secrets ? { streamWrite: (line: string) => secrets.scrub(line) } : {},
    },
    options.destination,
  );
}
