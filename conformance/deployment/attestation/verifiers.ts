import type { AttestationEvidenceV2, EvidenceVerification, ExpectedEvidence } from '@sigil/plugin-api';
import { createSnpVerifier, PLATFORM as SEV_SNP } from '../../../attestation/sev-snp/verify.ts';
import { TDX_PLATFORM, verifyTdxEvidence } from '../../../attestation/tdx/verify.ts';
import { VTPM_PLATFORM, verifyVtpmEvidence } from '../../../attestation/vtpm/verify.ts';

type Verify = (evidence: AttestationEvidenceV2, expected: ExpectedEvidence) => EvidenceVerification;

/**
 * The verifiers the runner judges a deployment's evidence with: the pure verify modules of Sigil's
 * built-in TEE backends (offline, with the vendors' roots they ship), under those plugins' default
 * policies: SEV-SNP refuses a migration agent and accepts SMT, TDX accepts an UpToDate TCB only, and a
 * vTPM's attestation key is taken on first use (no tester pins one). The runner cannot judge evidence
 * of any other platform.
 */
const snp = createSnpVerifier({ allowMigrationAgent: false, allowSmt: true });

export const RUNNER_VERIFIERS: Readonly<Record<string, Verify>> = {
  [SEV_SNP]: (evidence, expected) => snp.verify(evidence, expected),
  [TDX_PLATFORM]: (evidence, expected) => verifyTdxEvidence(evidence, expected),
  [VTPM_PLATFORM]: (evidence, expected) => verifyVtpmEvidence(evidence, expected),
};
