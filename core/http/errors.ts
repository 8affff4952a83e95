import type { IncomingHttpHeaders } from 'node:http';
import type { Context, Next } from 'koa';
import { isSigilError, SigilError, type ErrorCode } from '@sigil/plugin-api';
import type { Logger } from '../log.ts';

/** The one place where error codes meet HTTP statuses. */
export const STATUS_BY_CODE: Record<ErrorCode, number> = {
  invalid_request: 400,
  unauthorized: 401,
  payment_required: 402,
  /** The call needs a capability of the client that its request did not declare (MCP 2026-07-28). */
  capability_required: 400,
  forbidden: 403,
  /** The request named a host this service does not answer for (DNS rebinding). */
  misdirected_request: 421,
  not_found: 404,
  method_not_allowed: 405,
  conflict: 409,
  proof_invalid: 422,
  payload_too_large: 413,
  unsupported_media_type: 415,
  rate_limited: 429,
  internal: 500,
  config_invalid: 500,
  plugin_invalid: 500,
  unavailable: 503,
};

export interface ErrorBody {
  code: string;
  message: string;
  hint?: string;
  details?: Record<string, unknown>;
}

/** Errors thrown by Koa and its body parser carry a status; give them a stable code too. */
function fromHttpError(err: {
  status: number;
  expose?: boolean;
  message: string;
  type?: string;
}): SigilError {
  if (err.status === 413) return new SigilError('payload_too_large', 'Request body is too large');
  if (err.status === 415) return new SigilError('unsupported_media_type', err.message);
  if (err.status === 405) return new SigilError('method_not_allowed', err.message);
  if (err.status === 404) return new SigilError('not_found', err.message);
  if (err.type === 'entity.parse.failed' || err.status === 400) {
    return new SigilError('invalid_request', 'Request body is not valid JSON', {
      hint: 'Send a JSON object',
    });
  }
  return new SigilError('invalid_request', err.expose ? err.message : 'Bad request');
}

export function toSigilError(err: unknown): SigilError {
  if (isSigilError(err)) return err;
  const status = (err as { status?: unknown } | null)?.status;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    return fromHttpError(err as { status: number; message: string });
  }
  return new SigilError('internal', 'Internal error', {
    hint: 'The request id in X-Request-Id finds it in the logs',
  });
}

export function errorBody(error: SigilError): ErrorBody {
  return {
    code: error.code,
    message: error.message,
    ...(error.hint === undefined ? {} : { hint: error.hint }),
    ...(error.details === undefined ? {} : { details: error.details }),
  };
}

/** The `WWW-Authenticate` value of a service's 401 answer to a request with these headers. */
export type AuthChallenge = (error: SigilError, headers: IncomingHttpHeaders) => string;

/** The answer to anything thrown while serving a request: its status, headers and the one JSON error shape. */
export function errorAnswer(
  err: unknown,
  log: Logger,
  request: { headers: IncomingHttpHeaders; challenge: AuthChallenge | undefined },
): { status: number; headers: Record<string, string> | undefined; body: ErrorBody } {
  const error = toSigilError(err);
  const status = STATUS_BY_CODE[error.code];
  // An expected 503 (at capacity, a part not configured or not reachable) is a warning, told by its
  // message; anything else unexpected is an error with its stack, logged and not shown.
  if (error.code === 'unavailable')
    log.warn({ code: error.code, error: error.message }, 'request unavailable');
  else if (status >= 500) log.error({ err }, 'request failed');
  // Every 401 says how to authenticate (RFC 9110), and why presented credentials were refused.
  const headers =
    status === 401 && request.challenge
      ? { ...error.headers, 'WWW-Authenticate': request.challenge(error, request.headers) }
      : error.headers;
  return { status, headers, body: errorBody(error) };
}

/** Turns anything thrown downstream into the one JSON error shape. */
export function errorHandler(logger: Logger, challenge?: AuthChallenge) {
  return async (ctx: Context, next: Next): Promise<void> => {
    try {
      await next();
      if (ctx.status === 404 && ctx.body === undefined) {
        throw new SigilError('not_found', `No route for ${ctx.method} ${ctx.path}`);
      }
    } catch (err) {
      const answer = errorAnswer(err, (ctx.state.log as Logger | undefined) ?? logger, {
        headers: ctx.req.headers,
        challenge,
      });
      ctx.status = answer.status;
      if (answer.headers) ctx.set(answer.headers);
      ctx.body = answer.body;
    }
  };
}
