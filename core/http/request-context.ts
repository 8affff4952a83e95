import { randomUUID } from 'node:crypto';
import type { Context, Next } from 'koa';
import type { Logger } from '../log.ts';

const INCOMING_ID = /^[A-Za-z0-9._-]{1,64}$/;

/**
 * Gives each request an id (kept from X-Request-Id when well-formed) and a logger bound to it and to
 * `ctx.state.logFields` (fields a later middleware adds, e.g. the auth method), and logs a line with
 * them when it ends.
 */
export function requestContext(logger: Logger) {
  // The access line holds the request's id, method, path, status and time, and the named values of
  // `logFields` (no header, body or query string), so it skips the redaction pass, which would double
  // the cost of a line logged on every request. The secret scrubber still sees it.
  const accessLog = logger.child({}, { redact: { paths: [] } });
  return async (ctx: Context, next: Next): Promise<void> => {
    const incoming = ctx.get('x-request-id');
    const requestId = INCOMING_ID.test(incoming) ? incoming : randomUUID();
    ctx.state.requestId = requestId;
    // Made on first use (most requests log nothing but their access line: a child logger per request
    // is a measurable share of a busy gateway's CPU), with the `logFields` set by then.
    let made: { fields: unknown; log: Logger } | undefined;
    Object.defineProperty(ctx.state, 'log', {
      enumerable: true,
      get: (): Logger => {
        const fields = ctx.state.logFields as Record<string, unknown> | undefined;
        if (made === undefined || made.fields !== fields)
          made = { fields, log: logger.child({ reqId: requestId, ...fields }) };
        return made.log;
      },
    });
    ctx.set('X-Request-Id', requestId);
    const started = process.hrtime.bigint();
    try {
      await next();
    } finally {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      // Path only: query strings can carry tokens.
      accessLog.info(
        {
          reqId: requestId,
          ...(ctx.state.logFields as Record<string, unknown> | undefined),
          method: ctx.method,
          path: ctx.path,
          status: ctx.status,
          ms: Math.round(ms * 10) / 10,
        },
        'request',
      );
    }
  };
}
