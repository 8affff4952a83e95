import {
  createPrivateKey,
  generateKeyPairSync,
  hkdfSync,
  randomBytes,
  type JsonWebKey,
  type KeyObject,
} from 'node:crypto';
import { SigilError } from '@sigil/plugin-api';

/**
 * The keys tee-vtpm seals, and how every other purpose's key comes from them.
 *
 * - `execution-proof`: the gateway's HMAC key for execution proofs, 32 bytes;
 * - `mcp-signing-key`: the runtime's ES256 key (MCP_SIGNING_KEY) as its P-256 private scalar `d`,
 *   32 bytes big-endian (`p256PrivateKey` of `@sigil/plugin-api/p256` makes the key of it, in the
 *   runtime as in `sigil tee seal`);
 * - `key-derivation`: a root of 32 bytes; the key of any other purpose (`provider-vault`, …) is
 *   HKDF-SHA256 of it with the purpose, so a key derived for one purpose tells nothing of the sealed
 *   keys or of another purpose's.
 */
export const SEALED_PURPOSES = ['execution-proof', 'mcp-signing-key', 'key-derivation'] as const;
export type SealedPurpose = (typeof SEALED_PURPOSES)[number];
const DERIVATION_ROOT: SealedPurpose = 'key-derivation';
export const KEY_BYTES = 32;

export const isSealedPurpose = (purpose: string): purpose is SealedPurpose =>
  (SEALED_PURPOSES as readonly string[]).includes(purpose);

/** The key of `purpose`: the unsealed one for a sealed purpose, derived from the root for any other. */
export function keyFor(sealed: ReadonlyMap<SealedPurpose, Uint8Array>, purpose: string): Uint8Array {
  const key = sealed.get(isSealedPurpose(purpose) ? purpose : DERIVATION_ROOT);
  if (key === undefined) throw new Error(`no sealed ${purpose} key was unsealed`);
  return isSealedPurpose(purpose)
    ? new Uint8Array(key)
    : new Uint8Array(hkdfSync('sha256', key, 'sigil:tee-vtpm', `sigil:${purpose}`, KEY_BYTES));
}

export const randomKey = (): Uint8Array => new Uint8Array(randomBytes(KEY_BYTES));

/** A 32-byte key from hex (what the environment gives `sigil tee seal`), naming `source` when it is not one. */
export function keyFromHex(value: string, source: string): Uint8Array {
  if (!/^[0-9a-fA-F]{64}$/.test(value))
    throw new SigilError('config_invalid', `${source} must be 32 bytes in hex (64 characters)`);
  return new Uint8Array(Buffer.from(value, 'hex'));
}

/** The private scalar of an ES256 key given as PKCS#8/SEC1 PEM or a JWK (MCP_SIGNING_KEY's forms). */
export function p256Scalar(pemOrJwk: string, source: string): Uint8Array {
  let key: KeyObject;
  try {
    const text = pemOrJwk.trim();
    key = text.startsWith('{')
      ? createPrivateKey({ key: JSON.parse(text) as JsonWebKey, format: 'jwk' })
      : createPrivateKey(text);
  } catch (cause) {
    throw new SigilError('config_invalid', `${source} is not a private key in PEM or JWK`, { cause });
  }
  const jwk = key.export({ format: 'jwk' });
  if (jwk.kty !== 'EC' || jwk.crv !== 'P-256' || jwk.d === undefined)
    throw new SigilError('config_invalid', `${source} is not an EC P-256 private key (ES256)`);
  return new Uint8Array(Buffer.from(jwk.d, 'base64url'));
}

/** The private scalar of a new P-256 key. */
export function newP256Scalar(): Uint8Array {
  const { d } = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'jwk' });
  return new Uint8Array(Buffer.from(d as string, 'base64url'));
}
