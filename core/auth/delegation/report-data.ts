import { canonicalJson, sha256 } from '../../crypto.ts';

/**
 * The 64 bytes of REPORT_DATA the runtime asks its TEE to bind into an attestation report:
 *
 * | bytes   | holds                                                                  |
 * | ------- | ---------------------------------------------------------------------- |
 * | 0..32   | the verifier's nonce (32 bytes it chose), so an old report is useless  |
 * | 32..48  | the first 16 bytes of SHA-256 of the runtime's JWKS (RFC 8785 JSON)    |
 * | 48..64  | zero (reserved)                                                        |
 */
export const REPORT_DATA_BYTES = 64;
export const NONCE_BYTES = 32;
export const JWKS_HASH_OFFSET = 32;
export const JWKS_HASH_BYTES = 16;

/** SHA-256 of the RFC 8785 canonical JSON of a JWKS document: the same bytes for the same keys, however served. */
export const jwksSha256 = (jwks: unknown): Buffer => sha256(canonicalJson(jwks));

export function delegationReportData(nonce: Uint8Array, jwksHash: Uint8Array): Buffer {
  if (nonce.length !== NONCE_BYTES) throw new RangeError(`the nonce must be ${NONCE_BYTES} bytes`);
  const data = Buffer.alloc(REPORT_DATA_BYTES);
  Buffer.from(nonce).copy(data, 0);
  Buffer.from(jwksHash).copy(data, JWKS_HASH_OFFSET, 0, JWKS_HASH_BYTES);
  return data;
}

/** REPORT_DATA[32:48]: the JWKS hash a report binds. */
export const boundJwksHash = (reportData: Uint8Array): Buffer =>
  Buffer.from(reportData).subarray(JWKS_HASH_OFFSET, JWKS_HASH_OFFSET + JWKS_HASH_BYTES);
