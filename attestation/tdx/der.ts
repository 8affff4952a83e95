/**
 * Just enough DER to read a certificate revocation list: node:crypto parses certificates but not
 * CRLs, and @phala/dcap-qvl's CRL handling only compares serial numbers (it neither checks a CRL's
 * signature nor its dates, and skips a CRL it cannot parse), so the verifier reads CRLs itself.
 * Pure: no I/O, bundled into the offline verification script.
 */

export interface Tlv {
  tag: number;
  /** Offset of the tag byte. */
  start: number;
  /** Offset of the first content byte. */
  contentStart: number;
  /** Offset just past the content. */
  end: number;
}

const TAG = {
  integer: 0x02,
  bitString: 0x03,
  sequence: 0x30,
  utcTime: 0x17,
  generalizedTime: 0x18,
} as const;

export function readTlv(bytes: Uint8Array, start: number, limit = bytes.length): Tlv {
  if (start + 2 > limit) throw new Error(`DER: truncated at offset ${start}`);
  const tag = bytes[start] as number;
  const first = bytes[start + 1] as number;
  let contentStart = start + 2;
  let length = first;
  if (first & 0x80) {
    const lengthBytes = first & 0x7f;
    if (lengthBytes === 0 || lengthBytes > 4) throw new Error(`DER: unsupported length at offset ${start}`);
    if (contentStart + lengthBytes > limit) throw new Error(`DER: truncated length at offset ${start}`);
    length = 0;
    for (let i = 0; i < lengthBytes; i++) length = length * 256 + (bytes[contentStart + i] as number);
    contentStart += lengthBytes;
  }
  const end = contentStart + length;
  if (end > limit) throw new Error(`DER: element at offset ${start} runs past its container`);
  return { tag, start, contentStart, end };
}

/** The elements directly inside a constructed element. */
export function childrenOf(bytes: Uint8Array, parent: Tlv): Tlv[] {
  const children: Tlv[] = [];
  for (let at = parent.contentStart; at < parent.end;) {
    const child = readTlv(bytes, at, parent.end);
    children.push(child);
    at = child.end;
  }
  return children;
}

function expectTag(element: Tlv | undefined, tag: number, what: string): Tlv {
  if (element?.tag !== tag) throw new Error(`DER: ${what} is missing or malformed`);
  return element;
}

/** UTCTime (two-digit years: 50–99 are 19xx, RFC 5280) or GeneralizedTime, both in UTC ('Z'). */
function readTime(bytes: Uint8Array, element: Tlv): Date {
  const text = Buffer.from(bytes.subarray(element.contentStart, element.end)).toString('latin1');
  const match =
    element.tag === TAG.utcTime
      ? /^(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/.exec(text)
      : /^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})Z$/.exec(text);
  if (match === null) throw new Error(`DER: unsupported time ${JSON.stringify(text)}`);
  const [, year, month, day, hour, minute, second] = match.map(Number) as number[];
  const fullYear =
    element.tag === TAG.utcTime ? ((year as number) < 50 ? 2000 : 1900) + (year as number) : year;
  return new Date(Date.UTC(fullYear as number, (month as number) - 1, day, hour, minute, second));
}

const isTime = (element: Tlv | undefined): element is Tlv =>
  element?.tag === TAG.utcTime || element?.tag === TAG.generalizedTime;

/** A serial number as uppercase hex without leading zeros, as node:crypto's X509Certificate shows it. */
export const normalizeSerial = (hex: string): string => hex.toUpperCase().replace(/^0+(?=.)/, '');

export interface RevocationList {
  /** The signed part (tbsCertList), to verify against the issuer's key. */
  signed: Uint8Array;
  /** The ECDSA signature, DER-encoded, as node:crypto verifies it. */
  signature: Uint8Array;
  thisUpdate: Date;
  nextUpdate: Date | undefined;
  /** Revoked certificates' serial numbers, normalized (see normalizeSerial). */
  revokedSerials: ReadonlySet<string>;
}

/** Parses a DER CRL (RFC 5280 CertificateList); throws on anything else. */
export function parseRevocationList(der: Uint8Array): RevocationList {
  const outer = expectTag(readTlv(der, 0), TAG.sequence, 'CertificateList');
  if (outer.end !== der.length) throw new Error('DER: trailing bytes after the CRL');
  const [tbs, , signatureValue] = childrenOf(der, outer);
  const signedList = expectTag(tbs, TAG.sequence, 'tbsCertList');
  const signatureBits = expectTag(signatureValue, TAG.bitString, 'signatureValue');
  const fields = childrenOf(der, signedList);
  let index = fields[0]?.tag === TAG.integer ? 1 : 0; // version, present in v2 CRLs
  index += 2; // signature algorithm, issuer
  const thisUpdate = fields[index++];
  if (!isTime(thisUpdate)) throw new Error('DER: thisUpdate is missing or malformed');
  const maybeNext = fields[index];
  const nextUpdate = isTime(maybeNext) ? readTime(der, maybeNext) : undefined;
  if (nextUpdate !== undefined) index++;
  const revokedSerials = new Set<string>();
  const revoked = fields[index];
  if (revoked?.tag === TAG.sequence) {
    for (const entry of childrenOf(der, revoked)) {
      const serial = expectTag(childrenOf(der, entry)[0], TAG.integer, 'a revoked serial number');
      revokedSerials.add(
        normalizeSerial(Buffer.from(der.subarray(serial.contentStart, serial.end)).toString('hex')),
      );
    }
  }
  return {
    signed: der.subarray(signedList.start, signedList.end),
    // A BIT STRING's first content byte counts its unused bits: 0 for a signature.
    signature: der.subarray(signatureBits.contentStart + 1, signatureBits.end),
    thisUpdate: readTime(der, thisUpdate),
    nextUpdate,
    revokedSerials,
  };
}
