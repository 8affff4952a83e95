import type { AttestationEvidenceV2, EvidenceVerification, ExpectedEvidence } from '@sigil/plugin-api';
import { createSnpVerifier, DEFAULT_SNP_POLICY } from './verify.ts';

/**
 * tee-sev-snp's `offlineVerifier`: the plugin's verifier with its default policy (no migration agent,
 * SMT accepted, no minimum TCB beyond the VCEK's), for the offline bundle script.
 */
const verifier = createSnpVerifier(DEFAULT_SNP_POLICY);

export const verify = (evidence: AttestationEvidenceV2, expected: ExpectedEvidence): EvidenceVerification =>
  verifier.verify(evidence, expected);
