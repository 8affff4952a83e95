import type { Hex } from 'viem';
import { viem } from '../../../core/chain/viem.ts';
import { hkdfSha256, hmacSha256 } from '../../../core/crypto.ts';

/**
 * The provider-vault message, exactly. A wallet signs it with `personal_sign` (EIP-191); the signature
 * is the root of the vault's encryption keys. Externally owned accounts sign deterministically (RFC 6979),
 * so the same wallet always gives the same signature, and so the same keys. It never changes for a
 * version: changing it would lock every stored key out.
 */
export const PROVIDER_VAULT_MESSAGE = [
  'Sigil provider vault',
  '',
  'Sign to unlock the LLM provider API keys you keep in your Sigil vault.',
  'This signature is the key to that vault: sign it only for a Sigil runtime you use.',
  '',
  'Version: 1',
].join('\n');

/** secp256k1's group order: a signature's `s` and `n - s` verify alike, so only the low one is used. */
const SECP256K1_N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;

/**
 * The 32-byte vault root of a provider-vault signature: HKDF-SHA256 over its `r` and low-`s` (so the
 * 65-byte, compact EIP-2098 and high-`s` forms of one signature give one root), salt and info fixed.
 */
export async function vaultRoot(signature: Hex): Promise<Buffer> {
  const { compactSignatureToSignature, hexToBigInt, parseCompactSignature, parseSignature } = await viem();
  const parsed =
    signature.length === 130
      ? compactSignatureToSignature(parseCompactSignature(signature))
      : parseSignature(signature);
  const r = hexToBigInt(parsed.r);
  let s = hexToBigInt(parsed.s);
  if (s > SECP256K1_N / 2n) s = SECP256K1_N - s;
  const ikm = Buffer.from(r.toString(16).padStart(64, '0') + s.toString(16).padStart(64, '0'), 'hex');
  return hkdfSha256(ikm, 'sigil:provider-vault:v1', 'sigil:provider-vault:v1:root');
}

/** What the vault keeps to tell a root it was written with from another: a MAC, revealing nothing of it. */
export const rootCheck = (root: Uint8Array): string =>
  hmacSha256(root, 'sigil:provider-vault:v1:check').toString('base64');
