import { SigilError } from '@sigil/plugin-api';

/**
 * A tool call refused for now, not for good: 429 `rate_limited` when the caller has its own limit of
 * calls in flight, 503 `unavailable` when the gateway has no process to spare. HTTP answers carry
 * `Retry-After`; MCP answers the JSON-RPC error of the same code with `data.retryAfterSeconds`.
 */
export class RetryLater extends SigilError {
  declare readonly code: 'rate_limited' | 'unavailable';

  constructor(
    code: 'rate_limited' | 'unavailable',
    message: string,
    readonly retryAfterSeconds: number,
    hint: string,
  ) {
    super(code, message, {
      hint,
      details: { retryAfterSeconds },
      headers: { 'Retry-After': String(retryAfterSeconds) },
    });
  }
}
