import type { LlmErrorKind } from './contracts/index.ts';
import { Redactor } from './redaction.ts';

/** Longest upstream message kept in an error: enough to say why, not a whole response body. */
const MESSAGE_LIMIT = 500;

export interface LlmProviderErrorOptions {
  /** The upstream's HTTP status, when it answered. */
  status?: number;
  /** How long the upstream asked to wait before a retry. */
  retryAfterMs?: number;
  /** The upstream's own error code or type (`invalid_api_key`, `rate_limit_error`…), safe to show. */
  upstreamCode?: string;
}

/**
 * What an `llm-provider` throws for every upstream failure (contracts/llm-provider-v1.ts).
 * Its message never contains the request's key: build it with {@link llmProviderError}, which removes
 * the key from whatever the upstream said. It carries no `cause`, so nothing of the upstream's
 * response (which may quote the key) reaches a log through it.
 */
/** Marks an LlmProviderError across copies of this package (see errors.ts). */
const BRAND = Symbol.for('sigil.plugin-api.LlmProviderError');

export class LlmProviderError extends Error {
  /** Read by isLlmProviderError; see BRAND. */
  readonly [BRAND] = true;
  readonly kind: LlmErrorKind;
  /** Whether the same request may succeed later: `rate_limit` and `upstream`. */
  readonly retryable: boolean;
  readonly status: number | undefined;
  readonly retryAfterMs: number | undefined;
  readonly upstreamCode: string | undefined;

  constructor(kind: LlmErrorKind, message: string, options: LlmProviderErrorOptions = {}) {
    super(message);
    this.name = 'LlmProviderError';
    this.kind = kind;
    this.retryable = kind === 'rate_limit' || kind === 'upstream';
    this.status = options.status;
    this.retryAfterMs = options.retryAfterMs;
    this.upstreamCode = options.upstreamCode;
  }
}

/** Whether `value` is an LlmProviderError of any copy of this package. */
export const isLlmProviderError = (value: unknown): value is LlmProviderError =>
  typeof value === 'object' && value !== null && (value as { [BRAND]?: unknown })[BRAND] === true;

/**
 * The kind of an upstream HTTP status: 401 and 403 `auth`, 429 `rate_limit`, 400, 404, 413 and 422
 * `bad_request`, anything else (5xx, or no answer at all) `upstream`.
 */
export function llmErrorKindForStatus(status: number | undefined): LlmErrorKind {
  switch (status) {
    case 401:
    case 403:
      return 'auth';
    case 429:
      return 'rate_limit';
    case 400:
    case 404:
    case 413:
    case 422:
      return 'bad_request';
    default:
      return 'upstream';
  }
}

/** `text` with `secret` replaced in every encoding (an upstream may quote it escaped or base64), and cut to a readable length. */
export function scrubSecret(text: string, secret: string): string {
  const scrubbed = Redactor.of([secret]).text(text);
  return scrubbed.length <= MESSAGE_LIMIT ? scrubbed : `${scrubbed.slice(0, MESSAGE_LIMIT)}…`;
}

/**
 * The wait an upstream asked for, from `retry-after-ms` (milliseconds) or `retry-after` (seconds or an
 * HTTP date), or undefined.
 */
export function retryAfterMs(headers: Headers | undefined, now = Date.now()): number | undefined {
  const ms = headers?.get('retry-after-ms');
  if (ms && /^\d+(\.\d+)?$/.test(ms.trim())) return Math.ceil(Number(ms));
  const after = headers?.get('retry-after')?.trim();
  if (!after) return undefined;
  if (/^\d+(\.\d+)?$/.test(after)) return Math.ceil(Number(after) * 1000);
  const date = Date.parse(after);
  return Number.isNaN(date) ? undefined : Math.max(0, date - now);
}

/**
 * An `LlmProviderError` for what an upstream answered: its kind from `status` (unless `kind` is
 * given), the provider's name and the upstream's message with `apiKey` removed.
 */
export function llmProviderError(input: {
  provider: string;
  apiKey: string;
  status?: number | undefined;
  message: string;
  kind?: LlmErrorKind;
  headers?: Headers | undefined;
  upstreamCode?: string | undefined;
}): LlmProviderError {
  const kind = input.kind ?? llmErrorKindForStatus(input.status);
  const prefix =
    input.status === undefined ? `${input.provider}:` : `${input.provider} answered ${input.status}:`;
  const options: LlmProviderErrorOptions = {};
  if (input.status !== undefined) options.status = input.status;
  const wait = retryAfterMs(input.headers);
  if (wait !== undefined) options.retryAfterMs = wait;
  if (input.upstreamCode) options.upstreamCode = scrubSecret(input.upstreamCode, input.apiKey);
  return new LlmProviderError(kind, `${prefix} ${scrubSecret(input.message, input.apiKey)}`, options);
}
