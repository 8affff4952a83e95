import { createECDH, createPrivateKey, type KeyObject } from 'node:crypto';
import { SigilError } from './errors.ts';

/**
 * `@sigil/plugin-api/p256`: an ES256 (ECDSA P-256) key from its 32-byte private scalar, the form a
 * TEE backend gives `signingKey('mcp-signing-key')` in (a sealed key is 32 bytes, whatever its
 * purpose), so that the backend that seals the key and the runtime that signs with it make the same
 * key of it.
 */

/** Bytes of a P-256 private scalar `d`, big-endian. */
export const P256_SCALAR_BYTES = 32;

/** The ES256 private key whose scalar `d` is `scalar`; `invalid_request` when it is none (0, or not below the order). */
export function p256PrivateKey(scalar: Uint8Array): KeyObject {
  const ecdh = createECDH('prime256v1');
  try {
    if (scalar.length !== P256_SCALAR_BYTES) throw new RangeError(`${scalar.length} bytes`);
    ecdh.setPrivateKey(Buffer.from(scalar));
  } catch (cause) {
    throw new SigilError('invalid_request', 'not a P-256 private scalar (32 bytes, 0 < d < n)', {
      details: { reason: 'not_a_p256_scalar' },
      cause,
    });
  }
  const point = ecdh.getPublicKey(); // 0x04 || x || y
  return createPrivateKey({
    format: 'jwk',
    key: {
      kty: 'EC',
      crv: 'P-256',
      d: Buffer.from(scalar).toString('base64url'),
      x: point.subarray(1, 1 + P256_SCALAR_BYTES).toString('base64url'),
      y: point.subarray(1 + P256_SCALAR_BYTES).toString('base64url'),
    },
  });
}
