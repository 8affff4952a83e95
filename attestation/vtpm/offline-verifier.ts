import type { AttestationEvidenceV2, EvidenceVerification, ExpectedEvidence } from '@sigil/plugin-api';
import { verifyVtpmEvidence } from './verify.ts';

/**
 * tee-vtpm's `offlineVerifier`: the plugin's verifier with no AK pinned, for the offline bundle
 * script: the AK is taken on first use, and its check `ak-trusted` says so with the AK's fingerprint,
 * which a relying party compares with the one it trusts.
 */
export const verify = (evidence: AttestationEvidenceV2, expected: ExpectedEvidence): EvidenceVerification =>
  verifyVtpmEvidence(evidence, expected);
