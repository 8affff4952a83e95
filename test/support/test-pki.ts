import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto';

/**
 * A certificate authority for tests, in process: P-256 keys, X.509 certificates and CRLs written as
 * DER by hand (node:crypto signs but issues neither), so a verifier can be tried end to end against
 * a root the test controls: revoked certificates, expired ones, collateral signed anew.
 */

function tlv(tag: number, ...content: Uint8Array[]): Buffer {
  const body = Buffer.concat(content);
  const length = body.length;
  const lengthBytes: number[] = [];
  for (let rest = length; rest > 0; rest = Math.floor(rest / 256)) lengthBytes.unshift(rest % 256);
  const header = length < 0x80 ? [length] : [0x80 | lengthBytes.length, ...lengthBytes];
  return Buffer.concat([Buffer.from([tag, ...header]), body]);
}

export const der = {
  sequence: (...content: Uint8Array[]) => tlv(0x30, ...content),
  set: (...content: Uint8Array[]) => tlv(0x31, ...content),
  /** A positive INTEGER from its big-endian hex. */
  integer: (hex: string) => {
    const bytes = Buffer.from(hex.length % 2 === 0 ? hex : `0${hex}`, 'hex');
    return tlv(0x02, (bytes[0] as number) & 0x80 ? Buffer.concat([Buffer.from([0]), bytes]) : bytes);
  },
  oid: (dotted: string) => {
    const [first, second, ...rest] = dotted.split('.').map(Number) as number[];
    const bytes = [40 * (first as number) + (second as number)];
    for (const arc of rest) {
      const sevenBits: number[] = [];
      for (let value = arc; ; value = Math.floor(value / 128)) {
        sevenBits.unshift((value % 128) | (sevenBits.length > 0 ? 0x80 : 0));
        if (value < 128) break;
      }
      bytes.push(...sevenBits);
    }
    return tlv(0x06, Buffer.from(bytes));
  },
  utf8: (text: string) => tlv(0x0c, Buffer.from(text)),
  boolean: (value: boolean) => tlv(0x01, Buffer.from([value ? 0xff : 0])),
  octets: (bytes: Uint8Array) => tlv(0x04, bytes),
  bits: (bytes: Uint8Array) => tlv(0x03, Buffer.from([0]), bytes),
  explicit: (tagNumber: number, ...content: Uint8Array[]) => tlv(0xa0 + tagNumber, ...content),
  /** UTCTime until 2049, GeneralizedTime from 2050 (RFC 5280). */
  time: (date: Date) => {
    const iso = date.toISOString().replace(/[-:T]/g, '').slice(0, 14);
    return date.getUTCFullYear() < 2050
      ? tlv(0x17, Buffer.from(`${iso.slice(2)}Z`))
      : tlv(0x18, Buffer.from(`${iso}Z`));
  },
};

const ECDSA_WITH_SHA256 = der.sequence(der.oid('1.2.840.10045.4.3.2'));
const nameOf = (commonName: string) =>
  der.sequence(der.set(der.sequence(der.oid('2.5.4.3'), der.utf8(commonName))));

export interface TestCertificate {
  name: string;
  serial: string;
  der: Buffer;
  pem: string;
  privateKey: KeyObject;
  publicKey: KeyObject;
}

export interface CertificateRequest {
  name: string;
  /** Big-endian hex. */
  serial: string;
  /** The issuer; the certificate signs itself without one. */
  issuer?: TestCertificate;
  notBefore: Date;
  notAfter: Date;
  ca: boolean;
  /** Further extensions, each a DER `Extension`. */
  extensions?: readonly Uint8Array[];
}

const toPem = (bytes: Buffer, label: string): string =>
  `-----BEGIN ${label}-----\n${(bytes.toString('base64').match(/.{1,64}/g) ?? []).join('\n')}\n-----END ${label}-----\n`;

/** Signs `signed` (a DER to-be-signed structure) and wraps it with the algorithm and signature. */
const signedStructure = (signed: Buffer, key: KeyObject): Buffer =>
  der.sequence(signed, ECDSA_WITH_SHA256, der.bits(sign('sha256', signed, key)));

export function issueCertificate(request: CertificateRequest): TestCertificate {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const basicConstraints = der.sequence(
    der.oid('2.5.29.19'),
    der.boolean(true),
    der.octets(request.ca ? der.sequence(der.boolean(true)) : der.sequence()),
  );
  const tbs = der.sequence(
    der.explicit(0, der.integer('02')),
    der.integer(request.serial),
    ECDSA_WITH_SHA256,
    nameOf(request.issuer?.name ?? request.name),
    der.sequence(der.time(request.notBefore), der.time(request.notAfter)),
    nameOf(request.name),
    publicKey.export({ type: 'spki', format: 'der' }),
    der.explicit(3, der.sequence(basicConstraints, ...(request.extensions ?? []))),
  );
  const bytes = signedStructure(tbs, request.issuer?.privateKey ?? privateKey);
  return {
    name: request.name,
    serial: request.serial,
    der: bytes,
    pem: toPem(bytes, 'CERTIFICATE'),
    privateKey,
    publicKey,
  };
}

export interface RevocationListRequest {
  issuer: TestCertificate;
  thisUpdate: Date;
  nextUpdate: Date;
  /** Serial numbers (big-endian hex) of the revoked certificates. */
  revoked?: readonly string[];
}

/** A v2 CRL, DER. */
export function issueRevocationList(request: RevocationListRequest): Buffer {
  const revoked = (request.revoked ?? []).map((serial) =>
    der.sequence(der.integer(serial), der.time(request.thisUpdate)),
  );
  const tbs = der.sequence(
    der.integer('01'),
    ECDSA_WITH_SHA256,
    nameOf(request.issuer.name),
    der.time(request.thisUpdate),
    der.time(request.nextUpdate),
    ...(revoked.length > 0 ? [der.sequence(...revoked)] : []),
  );
  return signedStructure(tbs, request.issuer.privateKey);
}
