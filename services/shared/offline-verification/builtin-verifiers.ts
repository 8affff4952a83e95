import type { AttestationEvidenceV2, EvidenceVerification, ExpectedEvidence } from '@sigil/plugin-api';
import snp from '../../../attestation/sev-snp/index.ts';
import { createSnpVerifier, PLATFORM as SEV_SNP } from '../../../attestation/sev-snp/verify.ts';
import { TDX_PLATFORM, verifyTdxEvidence } from '../../../attestation/tdx/verify.ts';
import { VTPM_PLATFORM, verifyVtpmEvidence } from '../../../attestation/vtpm/verify.ts';
import type { BuiltinPlatform } from './builtin-platforms.ts';

/** A platform's verifier of evidence alone, offline: what `sigil attestation verify` and the conformance runner judge with. */
export type EvidenceVerifierFn = (
  evidence: AttestationEvidenceV2,
  expected: ExpectedEvidence,
) => EvidenceVerification;

/**
 * The pure verify modules of Sigil's built-in TEE backends, under those plugins' default policies
 * (SEV-SNP: no migration agent, SMT as its config defaults; TDX: an UpToDate TCB only), with the
 * vendors' roots they ship. A vTPM's attestation key is trusted on first use unless pinned.
 */
export function builtinVerifiers(
  options: { trustedAkFingerprints?: readonly string[] } = {},
): Readonly<Record<BuiltinPlatform, EvidenceVerifierFn>> {
  const { allowMigrationAgent, allowSmt } = snp.config.parse({});
  const snpVerifier = createSnpVerifier({ allowMigrationAgent, allowSmt });
  const trustedAkFingerprints = options.trustedAkFingerprints ?? [];
  return {
    [SEV_SNP]: (evidence, expected) => snpVerifier.verify(evidence, expected),
    [TDX_PLATFORM]: (evidence, expected) => verifyTdxEvidence(evidence, expected),
    [VTPM_PLATFORM]: (evidence, expected) =>
      verifyVtpmEvidence(evidence, expected, { trustedAkFingerprints }),
  };
}
