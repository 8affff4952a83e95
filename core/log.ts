import { pino, type Logger as PinoLogger, type DestinationStream } from 'pino';

export type Logger = PinoLogger;

/**
 * Secret values known to the process (config secrets, and later per-wallet secrets while in use).
 * Every log line passes through `scrub` before it is written, so a secret that slips into a message,
 * an error or a field is replaced even where no redaction path foresaw it.
 */
export class SecretRegistry {
  private readonly values = new Set<string>();

  add(value: string | undefined): void {
    // Very short values would redact ordinary words; nobody uses a 5-character secret.
    if (value !== undefined && value.length >= 6) this.values.add(value);
  }

  remove(value: string): void {
    this.values.delete(value);
  }

  scrub(text: string): string {
    let out = text;
    for (const value of this.values) {
      if (out.includes(value)) out = out.split(value).join('[REDACTED]');
    }
    return out;
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
  destination?: DestinationStream;
}

/**
 * An asynchronous log destination that batches lines: one write per 16 KB or per 250 ms instead of one
 * per line (a write per request costs a busy service a tenth of its CPU here; each write wakes a thread
 * of the pool, and at 4 KB a busy gateway's access lines still took 2 % of its CPU). Pino flushes it on
 * exit.
 */
export const logDestination = (dest: number | string): DestinationStream =>
  pino.destination({ dest, sync: false, minLength: 16 * 1024, maxWrite: 64 * 1024, periodicFlush: 250 });

export function createLogger(options: LoggerOptions = {}): Logger {
  const secrets = options.secrets;
  return pino(
    {
      level: options.level ?? 'info',
      ...(options.name === undefined ? {} : { name: options.name }),
      redact: { paths: REDACT_PATHS, censor: '[REDACTED]' },
      hooks: secrets ? { streamWrite: (line: string) => secrets.scrub(line) } : {},
    },
    // stderr: stdout stays clean for what commands print (URLs, JSON), whatever the log level.
    options.destination ?? logDestination(2),
  );
}
