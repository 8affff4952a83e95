import { PACKAGE_REGISTRY_FAILURE_CODES, type PackageRegistryFailureV2, SigilError } from '@sigil/plugin-api';

/** The reasons this registry reports: it never builds, so never `build_required`. */
export type OciFailure = Exclude<PackageRegistryFailureV2, 'build_required'>;

/** A registry failure with the reason the contract names, so callers need not know the distribution API. */
export class OciRegistryError extends SigilError {
  readonly reason: OciFailure;
  constructor(
    reason: OciFailure,
    message: string,
    details: Record<string, unknown> = {},
    options: { hint?: string; cause?: unknown } = {},
  ) {
    super(PACKAGE_REGISTRY_FAILURE_CODES[reason], message, { ...options, details: { reason, ...details } });
    this.name = 'OciRegistryError';
    this.reason = reason;
  }
}

/** Content whose sha256 is not the digest it was asked for by; none of it was kept. */
export class OciIntegrityError extends OciRegistryError {
  constructor(image: string, what: string, expected: string, actual: string) {
    super(
      'integrity_mismatch',
      `integrity mismatch for ${image}: the registry's ${what} is ${actual}, not ${expected}`,
      { package: image, blob: what, expected, actual },
    );
    this.name = 'OciIntegrityError';
  }
}

export const invalidRequest = (message: string, hint?: string): SigilError =>
  new SigilError('invalid_request', message, hint === undefined ? {} : { hint });
