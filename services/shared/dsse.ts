import { createPrivateKey, createPublicKey, sign, verify, type KeyObject } from 'node:crypto';

/**
 * DSSE (Dead Simple Signing Envelope, https://github.com/secure-systems-lab/dsse, v1.0) with Ed25519:
 * what in-toto statements are signed in. The signature is over PAE(payloadType, payload), never over
 * the payload alone, so a payload cannot be read as another type.
 */

export interface DsseEnvelope {
  payloadType: string;
  /** The payload's bytes, base64. */
  payload: string;
  signatures: { keyid: string; sig: string }[];
}

/**
 * The pre-authentication encoding, `DSSEv1 SP LEN(type) SP type SP LEN(body) SP body`, lengths as
 * ASCII decimals of byte counts. Written here: the one library that has it, @sigstore/core, is only a
 * transitive dependency (through pacote), and its entry module loads its ASN.1 and X.509 parsers,
 * which the offline verification script would then carry; test/services/shared/dsse.test.ts checks
 * this against the specification's example.
 */
export function preAuthEncoding(payloadType: string, payload: Uint8Array): Buffer {
  const type = Buffer.from(payloadType, 'utf8');
  return Buffer.concat([
    Buffer.from(`DSSEv1 ${type.length} `, 'ascii'),
    type,
    Buffer.from(` ${payload.length} `, 'ascii'),
    payload,
  ]);
}

/** PKCS#8 DER of an Ed25519 private key up to its 32-byte seed (RFC 8410). */
const ED25519_PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');

/** The Ed25519 key whose seed is `seed`: any 32 bytes are one (RFC 8032). */
export function ed25519FromSeed(seed: Uint8Array): KeyObject {
  if (seed.length !== 32) throw new RangeError(`an Ed25519 seed is 32 bytes, not ${seed.length}`);
  return createPrivateKey({
    key: Buffer.concat([ED25519_PKCS8_PREFIX, seed]),
    format: 'der',
    type: 'pkcs8',
  });
}

/** The raw 32 bytes of an Ed25519 public key (of a private key, its public key's). */
export const ed25519Raw = (key: KeyObject): Buffer =>
  Buffer.from(
    (key.type === 'private' ? createPublicKey(key) : key).export({ format: 'jwk' }).x as string,
    'base64url',
  );

/** An Ed25519 public key from its raw 32 bytes; throws when they are not 32. */
export function ed25519FromRaw(raw: Uint8Array): KeyObject {
  if (raw.length !== 32) throw new RangeError(`an Ed25519 public key is 32 bytes, not ${raw.length}`);
  return createPublicKey({
    key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(raw).toString('base64url') },
    format: 'jwk',
  });
}

export function signEnvelope(
  payloadType: string,
  payload: Uint8Array,
  key: { privateKey: KeyObject; keyid: string },
): DsseEnvelope {
  const sig = sign(null, preAuthEncoding(payloadType, payload), key.privateKey);
  return {
    payloadType,
    payload: Buffer.from(payload).toString('base64'),
    signatures: [{ keyid: key.keyid, sig: sig.toString('base64') }],
  };
}

/**
 * Whether one of the envelope's signatures verifies with `publicKey` (Ed25519 over the PAE). Key ids
 * are not looked at: DSSE makes them an unauthenticated hint.
 */
export function envelopeVerifies(envelope: DsseEnvelope, publicKey: KeyObject): boolean {
  const pae = preAuthEncoding(envelope.payloadType, Buffer.from(envelope.payload, 'base64'));
  return envelope.signatures.some((signature) =>
    verify(null, pae, publicKey, Buffer.from(signature.sig, 'base64')),
  );
}
