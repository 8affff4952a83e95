/**
 * Typed errors with stable codes. Everything the services reject is a SigilError; the HTTP status of
 * each code lives in one table (core/http/errors.ts), so a code means the same thing everywhere.
 */
export type ErrorCode =
  | 'invalid_request'
  | 'unauthorized'
  | 'forbidden'
  | 'misdirected_request'
  | 'not_found'
  | 'method_not_allowed'
  | 'conflict'
  | 'payload_too_large'
  | 'unsupported_media_type'
  | 'rate_limited'
  | 'payment_required'
  | 'proof_invalid'
  | 'unavailable'
  | 'internal'
  | 'config_invalid'
  | 'plugin_invalid';

export interface SigilErrorOptions {
  hint?: string;
  /** Machine-readable detail safe to show the caller (never a secret). */
  details?: Record<string, unknown>;
  /** Response headers the error needs (e.g. x402's PAYMENT-REQUIRED); never a secret. */
  headers?: Record<string, string>;
  cause?: unknown;
}

export class SigilError extends Error {
  readonly code: ErrorCode;
  readonly hint: string | undefined;
  readonly details: Record<string, unknown> | undefined;
  readonly headers: Record<string, string> | undefined;

  constructor(code: ErrorCode, message: string, options: SigilErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'SigilError';
    this.code = code;
    this.hint = options.hint;
    this.details = options.details;
    this.headers = options.headers;
  }
}

export const isSigilError = (value: unknown): value is SigilError => value instanceof SigilError;
