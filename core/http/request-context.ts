import { randomUUID } from 'node:crypto';
import type { Context, Next } from 'koa';
import type { Logger } from '../log.ts';

const INCOMING_ID = /^[A-Za-z0-9._-]{1,64}$/;

/** Fields a request's log lines carry beyond its id (e.g. the auth method), set by what serves it. */
export type LogFields = Record<string, unknown> | undefined;

/**
 * What every request gets, with Koa or without: an id (kept from X-Request-Id when well-formed), a
 * logger bound to it and to its log fields, made on first use, and an access line when it ends.
 */
export class RequestLogging {
  /**
   * The access line holds the request's id, method, path, status and time, and the named values of its
   * log fields (no header, body or query string), so it skips the redaction pass, which would double
   * the cost of a line logged on every request. The secret scrubber still sees it.
   */
  private readonly access: Logger;

  constructor(private readonly logger: Logger) {
    this.access = logger.child({}, { redact: { paths: [] } });
  }

  requestId(incoming: string): string {
    return INCOMING_ID.test(incoming) ? incoming : randomUUID();
  }

  /**
   * The request's logger, made on first use (most requests log nothing but their access line: a child
   * logger per request is a measurable share of a busy gateway's CPU), with the fields set by then.
   */
  lazyLog(requestId: string, fields: () => LogFields): () => Logger {
    let made: { fields: LogFields; log: Logger } | undefined;
    return () => {
      const current = fields();
      if (made === undefined || made.fields !== current)
        made = { fields: current, log: this.logger.child({ reqId: requestId, ...current }) };
      return made.log;
    };
  }

  /** The access line of a request that began at `started` (process.hrtime.bigint()). Path only: query strings can carry tokens. */
  accessLine(
    requestId: string,
    fields: LogFields,
    method: string,
    path: string,
    status: number,
    started: bigint,
  ): void {
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    this.access.info(
      { reqId: requestId, ...fields, method, path, status, ms: Math.round(ms * 10) / 10 },
      'request',
    );
  }
}

/**
 * Gives each request an id and a logger bound to it and to `ctx.state.logFields` (fields a later
 * middleware adds, e.g. the auth method), and logs a line with them when it ends.
 */
export function requestContext(logging: RequestLogging) {
  return async (ctx: Context, next: Next): Promise<void> => {
    const requestId = logging.requestId(ctx.get('x-request-id'));
    ctx.state.requestId = requestId;
    const log = logging.lazyLog(requestId, () => ctx.state.logFields as LogFields);
    Object.defineProperty(ctx.state, 'log', { enumerable: true, get: log });
    ctx.set('X-Request-Id', requestId);
    const started = process.hrtime.bigint();
    try {
      await next();
    } finally {
      logging.accessLine(
        requestId,
        ctx.state.logFields as LogFields,
        ctx.method,
        ctx.path,
        ctx.status,
        started,
      );
    }
  };
}
