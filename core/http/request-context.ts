import { randomUUID } from 'node:crypto';
import type { Context, Next } from 'koa';
import type { Logger } from '../log.ts';
import { RequestSummary } from './request-summary.ts';

const INCOMING_ID = /^[A-Za-z0-9._-]{1,64}$/;

/** Fields a request's log lines carry beyond its id (e.g. the auth method), set by what serves it. */
export type LogFields = Record<string, unknown> | undefined;

/**
 * What every request gets, with Koa or without: an id (kept from X-Request-Id when well-formed), a
 * logger bound to it and to its log fields, made on first use, and when it ends an access line at
 * debug and a count in the summary logged at info every interval.
 */
export class RequestLogging {
  /**
   * The access line holds the request's id, method, path, status and time, and the named values of its
   * log fields (no header, body or query string), so it skips the redaction pass, which would double
   * the cost of a line logged on every request. The secret scrubber still sees it.
   */
  private readonly access: Logger;
  /** Whether access lines are written at all (the level is fixed at start: checked once). */
  private readonly accessLines: boolean;
  private readonly summary: RequestSummary | undefined;

  constructor(
    private readonly logger: Logger,
    /** How often the request summary is logged; none without it. */
    summaryIntervalMs?: number,
  ) {
    this.access = logger.child({}, { redact: { paths: [] } });
    this.accessLines = this.access.isLevelEnabled('debug');
    this.summary =
      summaryIntervalMs === undefined ? undefined : new RequestSummary(logger, summaryIntervalMs);
  }

  /** Logs the summary of the requests not yet summarized, and stops summarizing. */
  stop(): void {
    this.summary?.stop();
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

  /**
   * The end of a request that began at `started` (process.hrtime.bigint()): counted by its route
   * template (`unmatched` without one) and status, and its access line. Path only: query strings can
   * carry tokens.
   */
  accessLine(
    requestId: string,
    fields: LogFields,
    method: string,
    path: string,
    route: string | undefined,
    status: number,
    started: bigint,
  ): void {
    this.summary?.count(method, route ?? 'unmatched', status);
    if (!this.accessLines) return;
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    this.access.debug(
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
        (ctx as Context & { _matchedRoute?: string })._matchedRoute,
        ctx.status,
        started,
      );
    }
  };
}
