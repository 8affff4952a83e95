/**
 * The SEV-SNP ATTESTATION_REPORT, versions 2 and 3, read field by field (AMD SEV-SNP Firmware ABI
 * specification 56860, "ATTESTATION_REPORT Structure"). Pure: bytes in, values out.
 */

/** Every report version this parser reads is this long. */
export const REPORT_BYTES = 0x4a0;
/** The signature covers bytes 0x000–0x29F. */
export const SIGNED_BYTES = 0x2a0;
export const SUPPORTED_VERSIONS: readonly number[] = [2, 3];
/** ECDSA P-384 with SHA-384: the only signature algorithm the firmware uses. */
export const ECDSA_P384_SHA384 = 1;
/** A P-384 scalar is 48 bytes; the report keeps each of r and s in a 72-byte little-endian field. */
const SCALAR_BYTES = 48;
const SCALAR_FIELD_BYTES = 72;

/**
 * One TCB version, by component. Milan and Genoa lay the eight bytes out as boot loader, TEE, four
 * reserved, SNP, microcode; Turin (family 1Ah) as FMC, boot loader, TEE, SNP, three reserved, microcode.
 */
export interface TcbParts {
  bootloader: number;
  tee: number;
  snp: number;
  microcode: number;
  /** Turin only. */
  fmc?: number;
}
export type TcbLayout = 'milan-genoa' | 'turin';

export function decodeTcb(raw: Uint8Array, layout: TcbLayout): TcbParts {
  const at = (index: number) => raw[index] ?? 0;
  return layout === 'turin'
    ? { fmc: at(0), bootloader: at(1), tee: at(2), snp: at(3), microcode: at(7) }
    : { bootloader: at(0), tee: at(1), snp: at(6), microcode: at(7) };
}

/** Which key signed the report (bits 2–4 of the flags at 0x48). */
export type SigningKeyKind = 'vcek' | 'vlek' | 'none';
const SIGNING_KEYS: Readonly<Record<number, SigningKeyKind>> = { 0: 'vcek', 1: 'vlek', 7: 'none' };

export interface GuestPolicy {
  abiMajor: number;
  abiMinor: number;
  smt: boolean;
  migrateMa: boolean;
  debug: boolean;
  singleSocket: boolean;
  cxlAllow: boolean;
  memAes256Xts: boolean;
  raplDis: boolean;
  ciphertextHiding: boolean;
  pageSwapDisable: boolean;
}

export interface PlatformInfo {
  smtEnabled: boolean;
  tsmeEnabled: boolean;
  eccEnabled: boolean;
  raplDisabled: boolean;
  ciphertextHidingEnabled: boolean;
  aliasCheckComplete: boolean;
}

export interface SnpReport {
  version: number;
  guestSvn: number;
  /** The raw GUEST_POLICY, and its bits by name. */
  policyRaw: bigint;
  policy: GuestPolicy;
  familyId: Uint8Array;
  imageId: Uint8Array;
  vmpl: number;
  signatureAlgorithm: number;
  currentTcb: TcbParts;
  platformInfo: PlatformInfo;
  authorKeyEnabled: boolean;
  signingKey: SigningKeyKind | `unknown (${number})`;
  reportData: Uint8Array;
  measurement: Uint8Array;
  hostData: Uint8Array;
  idKeyDigest: Uint8Array;
  authorKeyDigest: Uint8Array;
  reportId: Uint8Array;
  reportIdMa: Uint8Array;
  /** The TCB the VCEK was derived for. */
  reportedTcbRaw: Uint8Array;
  reportedTcb: TcbParts;
  tcbLayout: TcbLayout;
  /** Version 3 on: the CPU's family, model and stepping. */
  cpuid?: { family: number; model: number; stepping: number };
  chipId: Uint8Array;
  committedTcb: TcbParts;
  currentVersion: string;
  committedVersion: string;
  launchTcb: TcbParts;
  /** What the signature covers. */
  signed: Uint8Array;
  /** r and s big-endian, 48 bytes each (IEEE P1363), or undefined when a field has more than 48 bytes. */
  signature: Uint8Array | undefined;
}

export type ParsedReport = { ok: true; report: SnpReport } | { ok: false; check: string; detail: string };

const bit = (value: bigint, index: number) => ((value >> BigInt(index)) & 1n) === 1n;

function decodePolicy(raw: bigint): GuestPolicy {
  return {
    abiMinor: Number(raw & 0xffn),
    abiMajor: Number((raw >> 8n) & 0xffn),
    smt: bit(raw, 16),
    migrateMa: bit(raw, 18),
    debug: bit(raw, 19),
    singleSocket: bit(raw, 20),
    cxlAllow: bit(raw, 21),
    memAes256Xts: bit(raw, 22),
    raplDis: bit(raw, 23),
    ciphertextHiding: bit(raw, 24),
    pageSwapDisable: bit(raw, 25),
  };
}

function decodePlatformInfo(raw: bigint): PlatformInfo {
  return {
    smtEnabled: bit(raw, 0),
    tsmeEnabled: bit(raw, 1),
    eccEnabled: bit(raw, 2),
    raplDisabled: bit(raw, 3),
    ciphertextHidingEnabled: bit(raw, 4),
    aliasCheckComplete: bit(raw, 5),
  };
}

/** One scalar, from its 72-byte little-endian field to 48 bytes big-endian; undefined if it does not fit. */
function scalar(field: Uint8Array): Uint8Array | undefined {
  if (field.subarray(SCALAR_BYTES).some((byte) => byte !== 0)) return undefined;
  return Uint8Array.from(field.subarray(0, SCALAR_BYTES)).reverse();
}

/** Family 19h is Milan and Genoa, 1Ah Turin: the family tells the TCB layout. */
const TURIN_FAMILY = 0x1a;

export function parseReport(bytes: Uint8Array): ParsedReport {
  if (bytes.length !== REPORT_BYTES) {
    return {
      ok: false,
      check: 'report',
      detail: `a report is ${REPORT_BYTES} bytes, this one ${bytes.length}`,
    };
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const version = view.getUint32(0x00, true);
  if (!SUPPORTED_VERSIONS.includes(version)) {
    return {
      ok: false,
      check: 'version',
      detail: `report version ${version} is not one this verifier reads (${SUPPORTED_VERSIONS.join(', ')})`,
    };
  }
  const field = (offset: number, length: number) => bytes.subarray(offset, offset + length);
  const cpuid =
    version >= 3
      ? { family: bytes[0x188] ?? 0, model: bytes[0x189] ?? 0, stepping: bytes[0x18a] ?? 0 }
      : undefined;
  const tcbLayout: TcbLayout = cpuid?.family === TURIN_FAMILY ? 'turin' : 'milan-genoa';
  const tcb = (offset: number) => decodeTcb(field(offset, 8), tcbLayout);
  const firmware = (offset: number) => `${bytes[offset + 2]}.${bytes[offset + 1]}.${bytes[offset]}`;
  const flags = view.getUint32(0x48, true);
  const signingKeyCode = (flags >> 2) & 0b111;
  const policyRaw = view.getBigUint64(0x08, true);
  const r = scalar(field(0x2a0, SCALAR_FIELD_BYTES));
  const s = scalar(field(0x2a0 + SCALAR_FIELD_BYTES, SCALAR_FIELD_BYTES));
  return {
    ok: true,
    report: {
      version,
      guestSvn: view.getUint32(0x04, true),
      policyRaw,
      policy: decodePolicy(policyRaw),
      familyId: field(0x10, 16),
      imageId: field(0x20, 16),
      vmpl: view.getUint32(0x30, true),
      signatureAlgorithm: view.getUint32(0x34, true),
      currentTcb: tcb(0x38),
      platformInfo: decodePlatformInfo(view.getBigUint64(0x40, true)),
      authorKeyEnabled: (flags & 1) === 1,
      signingKey: SIGNING_KEYS[signingKeyCode] ?? `unknown (${signingKeyCode})`,
      reportData: field(0x50, 64),
      measurement: field(0x90, 48),
      hostData: field(0xc0, 32),
      idKeyDigest: field(0xe0, 48),
      authorKeyDigest: field(0x110, 48),
      reportId: field(0x140, 32),
      reportIdMa: field(0x160, 32),
      reportedTcbRaw: field(0x180, 8),
      reportedTcb: tcb(0x180),
      tcbLayout,
      ...(cpuid === undefined ? {} : { cpuid }),
      chipId: field(0x1a0, 64),
      committedTcb: tcb(0x1e0),
      currentVersion: firmware(0x1e8),
      committedVersion: firmware(0x1ec),
      launchTcb: tcb(0x1f0),
      signed: field(0, SIGNED_BYTES),
      signature: r === undefined || s === undefined ? undefined : new Uint8Array([...r, ...s]),
    },
  };
}
