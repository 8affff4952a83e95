import { canonicalJson, sha256 } from '../../crypto.ts';

/**
 * The 64 bytes of REPORT_DATA a service asks its TEE to bind into an attestation report:
 *
 * | bytes   | holds                                                                                  |
 * | ------- | -------------------------------------------------------------------------------------- |
 * | 0..32   | the verifier's nonce (32 bytes it chose), so an old report is useless                  |
 * | 32..48  | the first 16 bytes of SHA-256 of the service's identity: the runtime's JWKS (RFC 8785  |
 * |         | JSON), the gateway's proof key fingerprint                                             |
 * | 48..64  | the first 16 bytes of SHA-256 of the build provenance key (Ed25519, its raw 32 bytes), |
 * |         | so the hardware vouches for the key that signs which code runs                         |
 */
export const REPORT_DATA_BYTES = 64;
export const NONCE_BYTES = 32;
export const JWKS_HASH_OFFSET = 32;
export const JWKS_HASH_BYTES = 16;
export const PROVENANCE_KEY_HASH_OFFSET = 48;
export const PROVENANCE_KEY_HASH_BYTES = 16;

/** SHA-256 of the RFC 8785 canonical JSON of a JWKS document: the same bytes for the same keys, however served. */
export const jwksSha256 = (jwks: unknown): Buffer => sha256(canonicalJson(jwks));

/** REPORT_DATA binding `nonce`, the service's identity hash and the provenance key's hash (each a SHA-256, truncated). */
export function delegationReportData(
  nonce: Uint8Array,
  jwksHash: Uint8Array,
  provenanceKeyHash: Uint8Array,
): Buffer {
  if (nonce.length !== NONCE_BYTES) throw new RangeError(`the nonce must be ${NONCE_BYTES} bytes`);
  const data = Buffer.alloc(REPORT_DATA_BYTES);
  Buffer.from(nonce).copy(data, 0);
  Buffer.from(jwksHash).copy(data, JWKS_HASH_OFFSET, 0, JWKS_HASH_BYTES);
  Buffer.from(provenanceKeyHash).copy(data, PROVENANCE_KEY_HASH_OFFSET, 0, PROVENANCE_KEY_HASH_BYTES);
  return data;
}

/** REPORT_DATA[32:48]: the JWKS hash a report binds. */
export const boundJwksHash = (reportData: Uint8Array): Buffer =>
  Buffer.from(reportData).subarray(JWKS_HASH_OFFSET, JWKS_HASH_OFFSET + JWKS_HASH_BYTES);
