import type { AttestationEvidenceV2, EvidenceVerification, TeeBackendV2 } from '@sigil/plugin-api';
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
  /** Ids of the verifier's checks that failed (`signature`, `debug`, `tcb`, …), when the evidence did not verify. */
  failedChecks?: readonly string[];
  checkedAt: Date;
}

/**
 * A verifier of one platform's evidence: a TEE backend of that platform (tee-backend v2), whose
 * `verify` checks the report's signature up to the vendor's root, its debug state and its TCB, and
 * reads its REPORT_DATA. The gateway uses the backends its kernel loaded.
 */
export type EvidenceVerifier = Pick<TeeBackendV2, 'platform' | 'verify'>;

export interface TrustInput {
  /** The runtime's evidence; undefined when it reports none (e.g. `tee-none`). */
  evidence: AttestationEvidenceV2 | undefined;
  /**
   * The 64 bytes of REPORT_DATA the runtime says its evidence binds, when it says so: the verifier
   * checks them against the report, which is how a report binding only their SHA-256 (a TPM without
   * SHA-512) is read. Without them REPORT_DATA is read from the report itself.
   */
  reportData?: Uint8Array;
  /** The nonce the gateway asked the report to bind at REPORT_DATA[0:32]. */
  nonce: Uint8Array;
  /** SHA-256 of the JWKS the gateway fetched. */
  jwksHash: Uint8Array;
  verifiers: readonly EvidenceVerifier[];
  /** Also when certificates and collateral must be valid. */
  now: Date;
}

export async function evaluateTrust(input: TrustInput): Promise<RuntimeTrust> {
  const judged = (
    state: TrustState,
    reason: string,
    platform: string,
    failedChecks?: readonly string[],
  ): RuntimeTrust => ({
    state,
    reason,
    platform,
    jwksSha256: Buffer.from(input.jwksHash).toString('hex'),
    ...(failedChecks === undefined ? {} : { failedChecks }),
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
      `the gateway loads no ${platform} TEE backend, so it cannot verify the runtime's ${platform} evidence`,
      platform,
    );
  }
  let verification: EvidenceVerification;
  try {
    verification = await verifier.verify(evidence, {
      at: input.now,
      ...(input.reportData === undefined ? {} : { reportData: input.reportData }),
    });
  } catch (err) {
    return judged(
      'degraded_no_attestation',
      `the ${platform} evidence could not be verified: ${(err as Error).message}`,
      platform,
    );
  }
  const claimed =
    verification.claims === undefined ? undefined : Buffer.from(verification.claims.reportData, 'hex');
  if (!verification.verified) {
    const failed = verification.checks.filter((check) => !check.ok);
    const binding =
      claimed?.length === REPORT_DATA_BYTES ? `; the report ${bindingOf(claimed, input).words}` : '';
    return judged(
      'degraded_no_attestation',
      `the ${platform} evidence does not verify: ${failed.map((check) => `${check.id} (${check.detail})`).join('; ')}${binding}`,
      platform,
      failed.map((check) => check.id),
    );
  }
  const reportData = input.reportData === undefined ? claimed : Buffer.from(input.reportData);
  if (reportData?.length !== REPORT_DATA_BYTES) {
    return judged(
      'degraded_no_attestation',
      `the verified ${platform} report gives ${reportData?.length ?? 0} bytes of REPORT_DATA, not the 64 its nonce and JWKS hash are read from`,
      platform,
    );
  }
  const binding = bindingOf(reportData, input);
  const words = `the verified ${platform} report ${binding.words}`;
  if (!binding.fresh) return judged('degraded_no_attestation', `${words} (not fresh)`, platform);
  if (!binding.sameJwks) return judged('degraded_hash_mismatch', words, platform);
  return judged('trusted', words, platform);
}

/** What REPORT_DATA binds, against the nonce sent and the JWKS served. */
function bindingOf(
  reportData: Buffer,
  input: TrustInput,
): { fresh: boolean; sameJwks: boolean; words: string } {
  const fresh = reportData.subarray(0, NONCE_BYTES).equals(Buffer.from(input.nonce));
  const expected = Buffer.from(input.jwksHash).subarray(0, JWKS_HASH_BYTES);
  const bound = boundJwksHash(reportData);
  const sameJwks = bound.equals(expected);
  const nonce = fresh
    ? "the gateway's nonce at REPORT_DATA[0:32]"
    : 'another nonce than the gateway sent at REPORT_DATA[0:32]';
  const jwks = sameJwks
    ? `the served JWKS's hash at [32:48]`
    : `JWKS hash ${bound.toString('hex')} at [32:48], not ${expected.toString('hex')} (the JWKS served)`;
  return { fresh, sameJwks, words: `binds ${nonce} and ${jwks}` };
}
