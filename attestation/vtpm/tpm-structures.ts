/**
 * The TPM 2.0 structures a quote is made of, parsed from their wire form (TPM 2.0 Library, Part 2:
 * big-endian integers, `TPM2B_*` as a 16-bit size and that many bytes). Pure: no I/O and no imports,
 * so the offline verifier bundles it as it is.
 */

/** `TPM_GENERATED_VALUE`: the TPM alone writes it at the head of what it signs (Part 2, 6.2). */
export const TPM_GENERATED_VALUE = 0xff544347;
/** `TPM_ST_ATTEST_QUOTE` (Part 2, 6.9). */
export const TPM_ST_ATTEST_QUOTE = 0x8018;

export const TPM_ALG = {
  sha1: 0x0004,
  sha256: 0x000b,
  sha384: 0x000c,
  sha512: 0x000d,
  null: 0x0010,
  ecdsa: 0x0018,
  ecc: 0x0023,
} as const;

/** `TPM_ECC_NIST_P256`. */
export const TPM_ECC_NIST_P256 = 0x0003;

/** The `TPMA_OBJECT` bits the verifier looks at (Part 2, 8.3). */
export const TPMA_OBJECT = {
  fixedTPM: 1 << 1,
  fixedParent: 1 << 4,
  sensitiveDataOrigin: 1 << 5,
  restricted: 1 << 16,
  decrypt: 1 << 17,
  sign: 1 << 18,
} as const;

/** `TPM_RH_ENDORSEMENT`: the hierarchy the attestation key is a primary key of. */
export const TPM_RH_ENDORSEMENT = 0x4000000b;

/** A structure that does not parse: what was expected, and at which byte. */
export class TpmParseError extends Error {}

/** Reads big-endian fields off a buffer, failing with the offset when it runs short. */
class Reader {
  private offset = 0;
  constructor(
    private readonly bytes: Uint8Array,
    private readonly what: string,
  ) {}

  private take(length: number, field: string): Uint8Array {
    if (this.offset + length > this.bytes.length)
      throw new TpmParseError(
        `${this.what}: ${field} needs ${length} bytes at offset ${this.offset}, ${this.bytes.length - this.offset} remain`,
      );
    const slice = this.bytes.subarray(this.offset, this.offset + length);
    this.offset += length;
    return slice;
  }

  private view(length: number, field: string): DataView {
    const slice = this.take(length, field);
    return new DataView(slice.buffer, slice.byteOffset, length);
  }

  u8(field: string): number {
    return this.view(1, field).getUint8(0);
  }

  u16(field: string): number {
    return this.view(2, field).getUint16(0);
  }

  u32(field: string): number {
    return this.view(4, field).getUint32(0);
  }

  u64(field: string): bigint {
    return this.view(8, field).getBigUint64(0);
  }

  /** A 16-bit tag (a structure's type, an algorithm) that must be `expected`, named `name` in the error. */
  tag(field: string, expected: number, name: string): number {
    const value = this.u16(field);
    if (value !== expected)
      throw new TpmParseError(`${this.what}: ${field} is 0x${value.toString(16)}, not ${name}`);
    return value;
  }

  /** A `TPM2B_*`: 16-bit size, then that many bytes. */
  sized(field: string): Uint8Array {
    return this.take(this.u16(`${field} size`), field);
  }

  /** Every byte must be read: trailing bytes mean the structure is not what it says. */
  end(): void {
    if (this.offset !== this.bytes.length)
      throw new TpmParseError(`${this.what}: ${this.bytes.length - this.offset} bytes after its end`);
  }
}

export interface PcrSelection {
  /** `TPM_ALG_ID` of the bank. */
  hashAlg: number;
  /** PCR indexes selected, ascending: the order their values enter the digest. */
  pcrs: number[];
}

export interface ClockInfo {
  clock: bigint;
  resetCount: number;
  restartCount: number;
  safe: boolean;
}

/** `TPMS_ATTEST` of a quote (`TPMS_QUOTE_INFO` as `attested`). */
export interface QuoteAttest {
  magic: number;
  type: number;
  qualifiedSigner: Uint8Array;
  extraData: Uint8Array;
  clockInfo: ClockInfo;
  firmwareVersion: bigint;
  pcrSelections: PcrSelection[];
  pcrDigest: Uint8Array;
}

function readPcrSelections(reader: Reader): PcrSelection[] {
  const count = reader.u32('TPML_PCR_SELECTION count');
  if (count > 16) throw new TpmParseError(`TPML_PCR_SELECTION: ${count} banks is not a real TPM's`);
  const selections: PcrSelection[] = [];
  for (let bank = 0; bank < count; bank += 1) {
    const hashAlg = reader.u16('TPMS_PCR_SELECTION hash');
    const size = reader.u8('TPMS_PCR_SELECTION sizeofSelect');
    const pcrs: number[] = [];
    for (let byte = 0; byte < size; byte += 1) {
      const bits = reader.u8('TPMS_PCR_SELECTION pcrSelect');
      for (let bit = 0; bit < 8; bit += 1) if (bits & (1 << bit)) pcrs.push(byte * 8 + bit);
    }
    selections.push({ hashAlg, pcrs });
  }
  return selections;
}

/** Parses a quote's `TPMS_ATTEST`, refusing any other kind of attestation or a structure not the TPM's. */
export function parseQuoteAttest(bytes: Uint8Array): QuoteAttest {
  const reader = new Reader(bytes, 'TPMS_ATTEST');
  const magic = reader.u32('magic');
  if (magic !== TPM_GENERATED_VALUE)
    throw new TpmParseError(
      `TPMS_ATTEST: magic is 0x${magic.toString(16)}, not TPM_GENERATED_VALUE 0x${TPM_GENERATED_VALUE.toString(16)}`,
    );
  const type = reader.tag('type', TPM_ST_ATTEST_QUOTE, 'TPM_ST_ATTEST_QUOTE (0x8018)');
  const qualifiedSigner = reader.sized('qualifiedSigner');
  const extraData = reader.sized('extraData');
  const clockInfo = {
    clock: reader.u64('clockInfo.clock'),
    resetCount: reader.u32('clockInfo.resetCount'),
    restartCount: reader.u32('clockInfo.restartCount'),
    safe: reader.u8('clockInfo.safe') !== 0,
  };
  const firmwareVersion = reader.u64('firmwareVersion');
  const pcrSelections = readPcrSelections(reader);
  const pcrDigest = reader.sized('pcrDigest');
  reader.end();
  return {
    magic,
    type,
    qualifiedSigner,
    extraData,
    clockInfo,
    firmwareVersion,
    pcrSelections,
    pcrDigest,
  };
}

/** `TPMT_SIGNATURE` with an ECDSA signature. */
export interface EcdsaSignature {
  hashAlg: number;
  r: Uint8Array;
  s: Uint8Array;
}

export function parseEcdsaSignature(bytes: Uint8Array): EcdsaSignature {
  const reader = new Reader(bytes, 'TPMT_SIGNATURE');
  reader.tag('sigAlg', TPM_ALG.ecdsa, 'TPM_ALG_ECDSA');
  const signature = {
    hashAlg: reader.u16('hash'),
    r: reader.sized('signatureR'),
    s: reader.sized('signatureS'),
  };
  reader.end();
  return signature;
}

/** `TPMT_PUBLIC` of an ECC key, with the bytes its name is computed from. */
export interface EccPublic {
  nameAlg: number;
  objectAttributes: number;
  authPolicy: Uint8Array;
  /** `TPMT_ECC_SCHEME`: the scheme and its hash, `TPM_ALG_NULL` when the key has none. */
  scheme: { scheme: number; hashAlg: number | undefined };
  /** `TPMT_SYM_DEF_OBJECT` algorithm: `TPM_ALG_NULL` for a signing key. */
  symmetric: number;
  curveId: number;
  x: Uint8Array;
  y: Uint8Array;
  /** The marshalled `TPMT_PUBLIC`, which the key's name is the digest of. */
  marshalled: Uint8Array;
}

/** Parses a `TPM2B_PUBLIC` holding an ECC key. */
export function parseEccPublic(bytes: Uint8Array): EccPublic {
  const outer = new Reader(bytes, 'TPM2B_PUBLIC');
  const marshalled = outer.sized('publicArea');
  outer.end();
  const reader = new Reader(marshalled, 'TPMT_PUBLIC');
  reader.tag('type', TPM_ALG.ecc, 'TPM_ALG_ECC');
  const nameAlg = reader.u16('nameAlg');
  const objectAttributes = reader.u32('objectAttributes');
  const authPolicy = reader.sized('authPolicy');
  const symmetric = reader.u16('symmetric.algorithm');
  if (symmetric !== TPM_ALG.null) {
    reader.u16('symmetric.keyBits');
    reader.u16('symmetric.mode');
  }
  const schemeAlg = reader.u16('scheme.scheme');
  const scheme = {
    scheme: schemeAlg,
    hashAlg: schemeAlg === TPM_ALG.null ? undefined : reader.u16('scheme.details.hashAlg'),
  };
  const curveId = reader.u16('curveID');
  if (reader.u16('kdf.scheme') !== TPM_ALG.null) reader.u16('kdf.details.hashAlg');
  const x = reader.sized('unique.x');
  const y = reader.sized('unique.y');
  reader.end();
  return { nameAlg, objectAttributes, authPolicy, scheme, symmetric, curveId, x, y, marshalled };
}

/** A `TPM_ALG_ID` as a word (`sha256`), or its hex. */
export function algorithmName(alg: number): string {
  const known = Object.entries(TPM_ALG).find(([, id]) => id === alg);
  return known ? known[0] : `0x${alg.toString(16).padStart(4, '0')}`;
}
