import type { PackageRegistryFailureV2 } from './contracts/package-registry-v2.ts';

/**
 * Typed errors with stable codes. Everything the services reject, and every failure a plugin reports to
 * them, is a SigilError; the host maps each code to an HTTP status and a JSON-RPC error in one table
 * each, so a code means the same thing everywhere.
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
  | 'capability_required'
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

/**
 * Marks a SigilError across copies of this package: a plugin installed with its own copy of
 * `@sigil/plugin-api` throws errors of its class, not the host's, so `instanceof` would miss them.
 */
const BRAND = Symbol.for('sigil.plugin-api.SigilError');

export class SigilError extends Error {
  /** Read by isSigilError; see BRAND. */
  readonly [BRAND] = true;
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

/** Whether `value` is a SigilError of any copy of this package (see BRAND). */
export const isSigilError = (value: unknown): value is SigilError =>
  typeof value === 'object' && value !== null && (value as { [BRAND]?: unknown })[BRAND] === true;

/**
 * The code of a package registry's failure by its `details.reason`: one table, so that the same
 * reason means the same HTTP status whichever registry reports it.
 */
export const PACKAGE_REGISTRY_FAILURE_CODES = Object.freeze({
  integrity_mismatch: 'conflict',
  not_found: 'not_found',
  unavailable: 'unavailable',
  invalid_metadata: 'unavailable',
  build_required: 'forbidden',
  install_failed: 'internal',
} as const satisfies Record<PackageRegistryFailureV2, ErrorCode>);

/**
 * The error a write fenced by a lease fails with once the lease is no longer held (`Leases.fenced`):
 * `conflict`, with `details.reason` `lease_lost`.
 */
export const leaseLost = (name: string): SigilError =>
  new SigilError('conflict', `The lease ${name} is no longer held: another holder may have taken it`, {
    details: { reason: 'lease_lost', lease: name },
  });

/** Whether `err` is the failure of a write fenced by a lost lease (see `leaseLost`). */
export const isLeaseLost = (err: unknown): boolean =>
  isSigilError(err) && err.code === 'conflict' && err.details?.reason === 'lease_lost';
