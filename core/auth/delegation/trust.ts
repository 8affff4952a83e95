import type { AttestationEvidence } from '@sigil/plugin-api';
import { boundJwksHash, JWKS_HASH_BYTES, NONCE_BYTES, REPORT_DATA_BYTES } from './report-data.ts';

/**
 * How far the gateway trusts the runtime whose delegated JWTs it accepts (runtime spec part 3):
 * - `trusted`: a verified attestation report of the runtime binds the SHA-256 of the JWKS the gateway
 *   verifies with at REPORT_DATA[32:48], so the signing key lives in the attested runtime;
 * - `degraded_hash_mismatch`: a verified report binds another hash;
 * - `degraded_no_attestation`: there is no report the gateway can verify (no TEE, no verifier for the
 *   platform, a report that does not verify, or one that is not fresh).
 */
export type TrustState = 'trusted' | 'degraded_hash_mismatch' | 'degraded_no_attestation';

export const TRUST_STATES: readonly TrustState[] = [
  'trusted',
  'degraded_hash_mismatch',
  'degraded_no_attestation',
];

export interface RuntimeTrust {
  state: TrustState;
  /** Why, in words for the operator. */
  reason: string;
  /** Platform of the evidence, or `none`. */
  platform: string;
  /** Hex SHA-256 of the JWKS the state was judged against. */
  jwksSha256: string;
  checkedAt: Date;
}

/**
 * Checks one platform's evidence. A verifier must check the report's signature up to the hardware
 * vendor's root (and whatever else makes it genuine on that platform) before returning its 64-byte
 * REPORT_DATA; it throws when the evidence does not verify. Verifiers for real platforms (SEV-SNP, TDX,
 * vTPM) arrive with their TEE backends; until then such evidence is judged `degraded_no_attestation`.
 */
export interface EvidenceVerifier {
  readonly platform: string;
  reportData(evidence: AttestationEvidence): Promise<Uint8Array>;
}

export interface TrustInput {
  /** The runtime's evidence; undefined when it reports none (e.g. `tee-none`). */
  evidence: AttestationEvidence | undefined;
  /** The nonce the gateway asked the report to bind at REPORT_DATA[0:32]. */
  nonce: Uint8Array;
  /** SHA-256 of the JWKS the gateway fetched. */
  jwksHash: Uint8Array;
  verifiers: readonly EvidenceVerifier[];
  now: Date;
}

export async function evaluateTrust(input: TrustInput): Promise<RuntimeTrust> {
  const judged = (state: TrustState, reason: string, platform: string): RuntimeTrust => ({
    state,
    reason,
    platform,
    jwksSha256: Buffer.from(input.jwksHash).toString('hex'),
    checkedAt: input.now,
  });
  const evidence = input.evidence;
  if (evidence === undefined) {
    return judged('degraded_no_attestation', 'the runtime reports no attestation (no TEE)', 'none');
  }
  const { platform } = evidence;
  const verifier = input.verifiers.find((candidate) => candidate.platform === platform);
  if (verifier === undefined) {
    return judged(
      'degraded_no_attestation',
      `the gateway has no verifier for ${platform} evidence, so it cannot rely on it`,
      platform,
    );
  }
  let reportData: Buffer;
  try {
    reportData = Buffer.from(await verifier.reportData(evidence));
  } catch (err) {
    return judged(
      'degraded_no_attestation',
      `the ${platform} evidence did not verify: ${(err as Error).message}`,
      platform,
    );
  }
  if (reportData.length !== REPORT_DATA_BYTES) {
    return judged('degraded_no_attestation', `REPORT_DATA is ${reportData.length} bytes, not 64`, platform);
  }
  if (!reportData.subarray(0, NONCE_BYTES).equals(Buffer.from(input.nonce))) {
    return judged(
      'degraded_no_attestation',
      'the report does not bind the nonce the gateway sent (not fresh)',
      platform,
    );
  }
  const expected = Buffer.from(input.jwksHash).subarray(0, JWKS_HASH_BYTES);
  const bound = boundJwksHash(reportData);
  if (!bound.equals(expected)) {
    return judged(
      'degraded_hash_mismatch',
      `the report binds JWKS hash ${bound.toString('hex')} at REPORT_DATA[32:48], not ${expected.toString('hex')} (the JWKS served)`,
      platform,
    );
  }
  return judged('trusted', `the ${platform} report binds the JWKS hash at REPORT_DATA[32:48]`, platform);
}
