import { type PackageRegistryFailureV2, SigilError } from '@sigil/plugin-api';

const CODES = {
  integrity_mismatch: 'conflict',
  not_found: 'not_found',
  unavailable: 'unavailable',
  invalid_metadata: 'unavailable',
  // As registry-pypi answers it: the package conflicts with the operator's policy (builds off).
  build_required: 'conflict',
  install_failed: 'internal',
} as const satisfies Record<PackageRegistryFailureV2, SigilError['code']>;

/** A failure with the contract's reason, so the gateway need not know git's or npm's errors. */
export class GitRegistryError extends SigilError {
  readonly reason: PackageRegistryFailureV2;
  constructor(
    reason: PackageRegistryFailureV2,
    message: string,
    options: { hint?: string; details?: Record<string, unknown> } = {},
  ) {
    super(CODES[reason], message, { hint: options.hint, details: { reason, ...options.details } });
    this.name = 'GitRegistryError';
    this.reason = reason;
  }
}

/** Input the contract never accepts (a URL scheme, a ref, a digest of another form): the caller's mistake. */
export function invalidRequest(message: string, hint?: string): SigilError {
  return new SigilError('invalid_request', message, { hint });
}
