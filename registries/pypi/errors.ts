import { type PackageRegistryFailureV2, SigilError } from '@sigil/plugin-api';

/** The error code each failure is reported under, so the gateway maps it to one HTTP status. */
const CODE = {
  integrity_mismatch: 'conflict',
  not_found: 'not_found',
  unavailable: 'unavailable',
  invalid_metadata: 'unavailable',
  build_required: 'conflict',
  install_failed: 'internal',
} as const satisfies Record<PackageRegistryFailureV2, SigilError['code']>;

/** A PyPI failure with the reason the contract names (`details.reason`), and the package it concerns. */
export class PypiRegistryError extends SigilError {
  readonly reason: PackageRegistryFailureV2;
  constructor(
    reason: PackageRegistryFailureV2,
    message: string,
    options: { package?: string; hint?: string; details?: Record<string, unknown>; cause?: unknown } = {},
  ) {
    super(CODE[reason], message, {
      details: {
        reason,
        ...(options.package === undefined ? {} : { package: options.package }),
        ...options.details,
      },
      ...(options.hint === undefined ? {} : { hint: options.hint }),
      ...(options.cause === undefined ? {} : { cause: options.cause }),
    });
    this.name = 'PypiRegistryError';
    this.reason = reason;
  }
}

/** Downloaded bytes whose sha256 is not the index's; nothing of them was unpacked. */
export class PypiIntegrityError extends PypiRegistryError {
  constructor(packageId: string, file: string, expected: string, actual: string) {
    super(
      'integrity_mismatch',
      `integrity mismatch for ${packageId}: ${file} should have ${expected} and has ${actual}; nothing was installed`,
      { package: packageId, details: { file, expected, actual } },
    );
    this.name = 'PypiIntegrityError';
  }
}
