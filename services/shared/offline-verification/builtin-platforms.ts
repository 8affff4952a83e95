import { PLATFORM as SEV_SNP } from '../../../attestation/sev-snp/platform.ts';
import { TDX_PLATFORM } from '../../../attestation/tdx/platform.ts';
import { VTPM_PLATFORM } from '../../../attestation/vtpm/verify.ts';

/** The platforms of Sigil's built-in TEE backends, by name alone: listing them loads no verifier. */
export const BUILTIN_PLATFORMS = [SEV_SNP, TDX_PLATFORM, VTPM_PLATFORM] as const;
export type BuiltinPlatform = (typeof BUILTIN_PLATFORMS)[number];
