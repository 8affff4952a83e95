import { createPublicKey, verify, X509Certificate, type KeyObject } from 'node:crypto';
import { TRUSTED_ROOT_CA_DER } from '@phala/dcap-qvl/src/constants.js';
import { normalizeSerial, parseRevocationList, type RevocationList } from './der.ts';
import { refuse } from './refusal.ts';

/**
 * Certificate chains and signatures of Intel's DCAP PKI, with node:crypto. Hand-written rather than
 * @phala/dcap-qvl's verifyCertificateChain because that one throws at the first problem (a verifier
 * here reports each check) and checks CRLs without their signatures or dates (see der.ts).
 * Pure: bundled into the offline verification script.
 */

/** Intel SGX Root CA, as @phala/dcap-qvl embeds it: every DCAP chain must end here. */
export const INTEL_SGX_ROOT_CA = new X509Certificate(Buffer.from(TRUSTED_ROOT_CA_DER));

export const commonName = (certificate: X509Certificate): string =>
  /(?:^|\n)CN=([^\n]*)/.exec(certificate.subject)?.[1] ?? certificate.subject.replace(/\n/g, ', ');

function parseCertificate(pem: string, position: string): X509Certificate {
  try {
    return new X509Certificate(pem);
  } catch (error) {
    return refuse(`the ${position} certificate cannot be parsed (${(error as Error).message})`);
  }
}

function assertValidAt(certificate: X509Certificate, at: Date): void {
  const [from, to] = [new Date(certificate.validFrom), new Date(certificate.validTo)];
  if (at < from)
    refuse(
      `${commonName(certificate)} is not valid before ${from.toISOString()} (checked at ${at.toISOString()})`,
    );
  if (at > to)
    refuse(`${commonName(certificate)} expired ${to.toISOString()} (checked at ${at.toISOString()})`);
}

function assertIssuedBy(certificate: X509Certificate, issuer: X509Certificate): void {
  if (!certificate.checkIssued(issuer) || !certificate.verify(issuer.publicKey))
    refuse(`${commonName(certificate)} is not signed by ${commonName(issuer)}`);
}

export interface VerifiedChain {
  /** Leaf first, then the intermediates, ending with the trusted root. */
  certificates: readonly X509Certificate[];
  leaf: X509Certificate;
  /** Who issued the leaf (an intermediate, or the root itself). */
  leafIssuer: X509Certificate;
}

/**
 * Checks `pems` (leaf first; the root may be included, and must then be `root`) up to `root`: each
 * certificate signed by the next, valid at `at`, the leaf not a CA and the intermediates CAs.
 */
export function verifyChain(pems: readonly string[], root: X509Certificate, at: Date): VerifiedChain {
  if (pems.length === 0) refuse('there is no certificate chain');
  const given = pems.map((pem, index) =>
    parseCertificate(pem, index === 0 ? 'leaf' : `chain's #${index + 1}`),
  );
  const last = given[given.length - 1] as X509Certificate;
  const chain = [...given];
  if (given.length > 1 && last.checkIssued(last)) {
    if (last.fingerprint256 !== root.fingerprint256)
      refuse(`the chain ends in ${commonName(last)}, a root other than the trusted ${commonName(root)}`);
    chain.pop();
  }
  const certificates = [...chain, root];
  certificates.forEach((certificate, index) => {
    const issuer = certificates[index + 1] ?? root;
    assertIssuedBy(certificate, issuer);
    assertValidAt(certificate, at);
    if (index === 0 && certificate.ca) refuse(`the leaf ${commonName(certificate)} is a CA certificate`);
    if (index > 0 && !certificate.ca) refuse(`${commonName(certificate)} issues certificates but is no CA`);
  });
  return {
    certificates,
    leaf: certificates[0] as X509Certificate,
    leafIssuer: certificates[1] as X509Certificate,
  };
}

/** ECDSA P-256 over SHA-256, the signature as r ‖ s (DCAP's format). */
export const verifiesP1363 = (key: KeyObject, data: Uint8Array, signature: Uint8Array): boolean =>
  verify('sha256', data, { key, dsaEncoding: 'ieee-p1363' }, signature);

/** A P-256 public key given as x ‖ y (a quote's attestation key). */
export function p256Key(xy: Uint8Array): KeyObject {
  const [x, y] = [xy.subarray(0, 32), xy.subarray(32, 64)].map((part) =>
    Buffer.from(part).toString('base64url'),
  );
  return createPublicKey({ key: { kty: 'EC', crv: 'P-256', x, y }, format: 'jwk' });
}

/** A CRL signed by `issuer` and current at `at`; refuses it otherwise. */
export function currentRevocationList(
  der: Uint8Array,
  issuer: X509Certificate,
  at: Date,
  what: string,
): RevocationList {
  let list: RevocationList;
  try {
    list = parseRevocationList(der);
  } catch (error) {
    return refuse(`the ${what} cannot be parsed (${(error as Error).message})`);
  }
  if (!verify('sha256', list.signed, issuer.publicKey, list.signature))
    refuse(`the ${what} is not signed by ${commonName(issuer)}`);
  if (at < list.thisUpdate)
    refuse(`the ${what} was issued ${list.thisUpdate.toISOString()}, after ${at.toISOString()}`);
  if (list.nextUpdate !== undefined && at > list.nextUpdate)
    refuse(`the ${what} was due for renewal ${list.nextUpdate.toISOString()}, before ${at.toISOString()}`);
  return list;
}

export function assertNotRevoked(certificate: X509Certificate, list: RevocationList, what: string): void {
  if (list.revokedSerials.has(normalizeSerial(certificate.serialNumber)))
    refuse(`${commonName(certificate)} (serial ${certificate.serialNumber}) is revoked by the ${what}`);
}
