import { generateKeyPairSync, sign, X509Certificate, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { AsnConvert, OctetString } from '@peculiar/asn1-schema';
import {
  AlgorithmIdentifier,
  AttributeTypeAndValue,
  AttributeValue,
  Certificate,
  Extension,
  Extensions,
  Name,
  RelativeDistinguishedName,
  SubjectPublicKeyInfo,
  TBSCertificate,
  Validity,
} from '@peculiar/asn1-x509';
import type { AttestationEvidenceV2 } from '@sigil/plugin-api';

/**
 * The real SEV-SNP material (test/fixtures/attestation/sev-snp, see its README), and what the tests
 * make of it: one bit flipped, a field changed, or a whole chain forged with keys of our own and the
 * report re-signed with them, which shows what exactly refuses a forgery.
 */

const FIXTURES = join(import.meta.dirname, '../../fixtures/attestation/sev-snp');
export const fixture = (name: string) => readFileSync(join(FIXTURES, name));

export const REPORT = fixture('attestation.bin');
export const VCEK = new X509Certificate(fixture('vcek.testcer')).toString();
/** The Milan ASK then ARK, one PEM string. */
export const MILAN_CHAIN = fixture('milan.testcer').toString('utf8');
/** Inside every certificate's validity: the VCEK is valid 2022-09-24 to 2029-09-24. */
export const AT = new Date('2023-06-01T00:00:00Z');
export const REPORT_DATA = Buffer.concat([Buffer.from([1, 2, 3, 4, 5]), Buffer.alloc(59)]);
export const MEASUREMENT =
  'b07af9620f3b839b47996422ddec6058338951d984e312115131ea82705eaf5b6bdf8a9ece31a5a608eb0cf2e4872b01';

export const evidenceOf = (report: Uint8Array, certificates: readonly string[]): AttestationEvidenceV2 => ({
  platform: 'sev-snp',
  report: Buffer.from(report).toString('base64'),
  certificates,
});
export const REAL_EVIDENCE = evidenceOf(REPORT, [VCEK, MILAN_CHAIN]);

/** A copy of `report` with bit `bit` of byte `offset` flipped. */
export function flipBit(report: Uint8Array, offset: number, bit = 0): Buffer {
  const copy = Buffer.from(report);
  copy[offset] = (copy[offset] as number) ^ (1 << bit);
  return copy;
}

const ECDSA_WITH_SHA384 = '1.2.840.10045.4.3.3';
const COMMON_NAME = '2.5.4.3';

export interface Forged {
  pem: string;
  keys: { privateKey: KeyObject; publicKey: KeyObject };
}

const nameOf = (commonName: string) =>
  new Name([
    new RelativeDistinguishedName([
      new AttributeTypeAndValue({ type: COMMON_NAME, value: new AttributeValue({ utf8String: commonName }) }),
    ]),
  ]);

/**
 * A certificate with a P-384 key of its own, signed (ECDSA SHA-384) by `issuer`'s key, or by its own
 * when self-signed; `extensions` as raw values by OID (AMD's are raw or DER, as the real VCEK has them).
 */
export function forgeCertificate(
  commonName: string,
  issuer: { commonName: string; forged: Forged } | 'self',
  extensions: ReadonlyMap<string, Uint8Array> = new Map(),
  validity = { notBefore: new Date('2020-01-01T00:00:00Z'), notAfter: new Date('2040-01-01T00:00:00Z') },
): Forged {
  const keys = generateKeyPairSync('ec', { namedCurve: 'secp384r1' });
  const signer =
    issuer === 'self'
      ? { commonName, privateKey: keys.privateKey }
      : { commonName: issuer.commonName, privateKey: issuer.forged.keys.privateKey };
  const algorithm = new AlgorithmIdentifier({ algorithm: ECDSA_WITH_SHA384 });
  const tbsCertificate = new TBSCertificate({
    version: 2,
    serialNumber: new Uint8Array([1]).buffer,
    signature: algorithm,
    issuer: nameOf(signer.commonName),
    validity: new Validity(validity),
    subject: nameOf(commonName),
    subjectPublicKeyInfo: AsnConvert.parse(
      keys.publicKey.export({ type: 'spki', format: 'der' }),
      SubjectPublicKeyInfo,
    ),
    extensions: new Extensions(
      [...extensions].map(
        ([extnID, value]) => new Extension({ extnID, critical: false, extnValue: new OctetString(value) }),
      ),
    ),
  });
  const signature = sign('sha384', Buffer.from(AsnConvert.serialize(tbsCertificate)), signer.privateKey);
  const certificate = new Certificate({
    tbsCertificate,
    signatureAlgorithm: algorithm,
    signatureValue: new Uint8Array(signature).buffer,
  });
  return { pem: new X509Certificate(Buffer.from(AsnConvert.serialize(certificate))).toString(), keys };
}

/** The real VCEK's AMD extensions (TCB components, hwid, product name), raw, by OID. */
export function realVcekExtensions(): Map<string, Uint8Array> {
  const { tbsCertificate } = AsnConvert.parse(fixture('vcek.testcer'), Certificate);
  return new Map(
    (tbsCertificate.extensions ?? [])
      .filter((extension) => extension.extnID.startsWith('1.3.6.1.4.1.3704.'))
      .map((extension) => [extension.extnID, new Uint8Array(extension.extnValue.buffer)]),
  );
}

/** A chain of our own that looks like AMD's Milan one: ARK-Milan ← SEV-Milan ← SEV-VCEK (with `vcekExtensions`). */
export function forgeMilanChain(vcekExtensions = realVcekExtensions()) {
  const ark = forgeCertificate('ARK-Milan', 'self');
  const ask = forgeCertificate('SEV-Milan', { commonName: 'ARK-Milan', forged: ark });
  const vcek = forgeCertificate('SEV-VCEK', { commonName: 'SEV-Milan', forged: ask }, vcekExtensions);
  return { ark, ask, vcek, roots: { ask: ask.pem, ark: ark.pem } };
}

/** `report` signed again with `key` (ECDSA P-384 over 0x000–0x29F, r and s little-endian in 72-byte fields). */
export function resign(report: Uint8Array, key: KeyObject): Buffer {
  const copy = Buffer.from(report);
  const signature = sign('sha384', copy.subarray(0, 0x2a0), { key, dsaEncoding: 'ieee-p1363' });
  copy.fill(0, 0x2a0);
  Buffer.from(signature.subarray(0, 48)).reverse().copy(copy, 0x2a0);
  Buffer.from(signature.subarray(48))
    .reverse()
    .copy(copy, 0x2a0 + 72);
  return copy;
}

export const POLICY_DEBUG = 19;
export const POLICY_MIGRATE_MA = 18;

/** A copy of `report` with GUEST_POLICY bit `bit` set or cleared. */
export function withPolicyBit(report: Uint8Array, bit: number, on: boolean): Buffer {
  const copy = Buffer.from(report);
  const policy = copy.readBigUInt64LE(0x08);
  const mask = 1n << BigInt(bit);
  copy.writeBigUInt64LE(on ? policy | mask : policy & ~mask, 0x08);
  return copy;
}

/** The GUIDs of the GHCB specification's certificate table entries. */
export const VCEK_GUID = '63da758d-e664-4564-adc5-f4b93be8accd';
export const ASK_GUID = '4ab7b379-bbac-4fe4-a02f-05aef327c782';
export const ARK_GUID = 'c0b406a4-a803-4952-9743-3fb6014cd0ae';

/** A GUID's bytes as the GHCB certificate table stores them: the first three fields little-endian. */
export function guidBytes(text: string): Buffer {
  const [a, b, c, d, e] = text.split('-') as [string, string, string, string, string];
  const field = (hex: string) => Buffer.from(hex, 'hex').reverse();
  return Buffer.concat([field(a), field(b), field(c), Buffer.from(d + e, 'hex')]);
}

/** A certificate table as a host writes it: entries, a zero entry, then the DER certificates. */
export function certificateTable(entries: readonly [guid: string, der: Buffer][]): Buffer {
  const headerBytes = (entries.length + 1) * 24;
  let offset = headerBytes;
  const header = entries.map(([guid, der]) => {
    const entry = Buffer.alloc(24);
    guidBytes(guid).copy(entry);
    entry.writeUInt32LE(offset, 16);
    entry.writeUInt32LE(der.length, 20);
    offset += der.length;
    return entry;
  });
  return Buffer.concat([...header, Buffer.alloc(24), ...entries.map(([, der]) => der)]);
}
