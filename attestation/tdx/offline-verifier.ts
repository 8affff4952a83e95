import type { AttestationEvidenceV2, EvidenceVerification, ExpectedEvidence } from '@sigil/plugin-api';
import { verifyTdxEvidence } from './verify.ts';

/**
 * tee-tdx's `offlineVerifier`: the plugin's verifier with its defaults (UpToDate the only TCB status
 * accepted, Intel's SGX root), for the offline bundle script.
 */
export const verify = (evidence: AttestationEvidenceV2, expected: ExpectedEvidence): EvidenceVerification =>
  verifyTdxEvidence(evidence, expected);
