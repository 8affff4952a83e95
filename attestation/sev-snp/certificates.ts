import { X509Certificate } from 'node:crypto';
import { AsnConvert } from '@peculiar/asn1-schema';
import { Certificate } from '@peculiar/asn1-x509';
import { fromBER, IA5String, Integer, OctetString } from 'asn1js';
import type { TcbLayout, TcbParts } from './report.ts';

/**
 * AMD's certificates as the verifier needs them: node:crypto checks signatures (RSA-PSS up the chain,
 * ECDSA P-384 on the report), @peculiar/asn1-x509 reads what node:crypto does not show (validity as
 * dates, AMD's extensions), asn1js decodes each extension's value. Pure: no file, no network.
 */

export interface AmdCertificate {
  x509: X509Certificate;
  /** The subject's common name, e.g. `SEV-VCEK`, `SEV-Milan`, `ARK-Milan`. */
  commonName: string;
  notBefore: Date;
  notAfter: Date;
  /** AMD's extensions (OID 1.3.6.1.4.1.3704.…), each value as the extension carries it. */
  amdExtensions: ReadonlyMap<string, Uint8Array>;
}

/** AMD's VCEK/VLEK extensions ("VCEK Certificate and KDS Interface Specification" 57230). */
const AMD_OID = '1.3.6.1.4.1.3704.';
export const OID_PRODUCT_NAME = '1.3.6.1.4.1.3704.1.2';
export const OID_HWID = '1.3.6.1.4.1.3704.1.4';
const TCB_OIDS: Readonly<Record<keyof TcbParts, string>> = {
  bootloader: '1.3.6.1.4.1.3704.1.3.1',
  tee: '1.3.6.1.4.1.3704.1.3.2',
  snp: '1.3.6.1.4.1.3704.1.3.3',
  microcode: '1.3.6.1.4.1.3704.1.3.8',
  fmc: '1.3.6.1.4.1.3704.1.3.9',
};

const PEM_BLOCK = /-----BEGIN CERTIFICATE-----[^-]+-----END CERTIFICATE-----/g;

/** Every PEM certificate in the given strings, in order. */
export const pemBlocks = (texts: readonly string[]): string[] =>
  texts.flatMap((text) => text.match(PEM_BLOCK) ?? []);

const commonNameOf = (subject: string): string =>
  subject
    .split('\n')
    .find((part) => part.startsWith('CN='))
    ?.slice(3) ?? '';

/** What node:crypto does not show, read with @peculiar/asn1-x509: validity as dates, AMD's extensions. */
function readFields(der: Buffer): Pick<AmdCertificate, 'notBefore' | 'notAfter' | 'amdExtensions'> {
  const { tbsCertificate } = AsnConvert.parse(der, Certificate);
  const amdExtensions = new Map<string, Uint8Array>();
  for (const extension of tbsCertificate.extensions ?? []) {
    if (extension.extnID.startsWith(AMD_OID))
      amdExtensions.set(extension.extnID, new Uint8Array(extension.extnValue.buffer));
  }
  return {
    notBefore: tbsCertificate.validity.notBefore.getTime(),
    notAfter: tbsCertificate.validity.notAfter.getTime(),
    amdExtensions,
  };
}

/**
 * A certificate, read by node:crypto and the ASN.1 parser; throws when either cannot read it. `lazy`
 * defers the ASN.1 parser, the slow part, until validity or extensions are first asked for: for the
 * shipped roots, most of which a chain never reaches.
 */
export function parseCertificate(encoded: string | Uint8Array, { lazy = false } = {}): AmdCertificate {
  const x509 = new X509Certificate(encoded);
  let fields = lazy ? undefined : readFields(x509.raw);
  const read = () => (fields ??= readFields(x509.raw));
  return {
    x509,
    commonName: commonNameOf(x509.subject),
    get notBefore() {
      return read().notBefore;
    },
    get notAfter() {
      return read().notAfter;
    },
    get amdExtensions() {
      return read().amdExtensions;
    },
  };
}

/** One extension's value decoded as the single ASN.1 element it should be, or undefined. */
function element(value: Uint8Array | undefined) {
  if (value === undefined) return undefined;
  const { offset, result } = fromBER(value);
  return offset === value.length ? result : undefined;
}

/** The TCB a VCEK (or VLEK) was issued for, by component; a component missing or malformed is absent. */
export function certifiedTcb(certificate: AmdCertificate, layout: TcbLayout): Partial<TcbParts> {
  const components = (Object.keys(TCB_OIDS) as (keyof TcbParts)[]).filter(
    (name) => name !== 'fmc' || layout === 'turin',
  );
  const parts: Partial<TcbParts> = {};
  for (const name of components) {
    const value = element(certificate.amdExtensions.get(TCB_OIDS[name]));
    if (value instanceof Integer) parts[name] = value.valueBlock.valueDec;
  }
  return parts;
}

/**
 * The chip id a VCEK was issued to (64 bytes; 8 on Turin). AMD's KDS puts the raw bytes in the
 * extension's value; an OCTET STRING wrapping them is accepted too, as other verifiers do.
 */
export function certifiedHwid(certificate: AmdCertificate): Uint8Array | undefined {
  const value = certificate.amdExtensions.get(OID_HWID);
  if (value === undefined) return undefined;
  const wrapped = value.length === 64 || value.length === 8 ? undefined : element(value);
  return wrapped instanceof OctetString ? new Uint8Array(wrapped.valueBlock.valueHexView) : value;
}

/** The product name the certificate states, e.g. `Milan-B0`. */
export function productName(certificate: AmdCertificate): string | undefined {
  const value = element(certificate.amdExtensions.get(OID_PRODUCT_NAME));
  return value instanceof IA5String ? value.getValue() : undefined;
}
