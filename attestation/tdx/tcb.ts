import type { X509Certificate } from 'node:crypto';
import { PCEID } from '@phala/dcap-qvl/src/oids.js';
import { tcbStatusSeverity } from '@phala/dcap-qvl/src/tcb_info.js';
import {
  findExtension,
  getCpuSvn,
  getFmspc,
  getIntelExtension,
  getPceSvn,
} from '@phala/dcap-qvl/src/utils.js';
import * as z from 'zod/mini';
import { refuse } from './refusal.ts';
import type { QeReport, TdReport } from './quote.ts';

/**
 * Intel's TDX TCB info and TD QE identity (PCS v4 responses) and the TCB status of a quote against
 * them. Hand-written: @phala/dcap-qvl evaluates the TCB only inside its all-or-nothing verify(), and
 * ignores TCB info's TDX module identities (TDX 1.5) and the TDX module's signer. The algorithm is
 * Intel's, as go-tdx-guest and Intel's QVL implement it. Pure: bundled into the offline script.
 */

export const TCB_STATUSES = [
  'UpToDate',
  'SWHardeningNeeded',
  'ConfigurationNeeded',
  'ConfigurationAndSWHardeningNeeded',
  'OutOfDate',
  'OutOfDateConfigurationNeeded',
  'Revoked',
] as const;
export type TcbStatus = (typeof TCB_STATUSES)[number];

// zod/mini rather than zod: the same checks at a twentieth of the size in the offline script.
const hex = z.string().check(z.regex(/^[0-9a-fA-F]*$/));
const svn = z.number().check(z.int(), z.minimum(0));
const svns = z.array(z.object({ svn })).check(z.length(16));
const status = z.enum(TCB_STATUSES);
const advisoryIDs = z.optional(z.array(z.string()));
const isvsvnLevelSchema = z.object({ tcb: z.object({ isvsvn: svn }), tcbStatus: status, advisoryIDs });
const maskedIdentity = { mrsigner: hex, attributes: hex, attributesMask: hex };
/** What TCB info and QE identity both start with. */
const header = {
  id: z.string(),
  version: z.number().check(z.int()),
  issueDate: z.iso.datetime(),
  nextUpdate: z.iso.datetime(),
};

const tcbInfoSchema = z.object({
  ...header,
  fmspc: hex,
  pceId: hex,
  tdxModule: z.optional(z.object(maskedIdentity)),
  tdxModuleIdentities: z.optional(
    z.array(z.object({ id: z.string(), ...maskedIdentity, tcbLevels: z.array(isvsvnLevelSchema) })),
  ),
  tcbLevels: z.array(
    z.object({
      tcb: z.object({ sgxtcbcomponents: svns, pcesvn: svn, tdxtcbcomponents: svns }),
      tcbStatus: status,
      advisoryIDs,
    }),
  ),
});
export type TcbInfo = z.infer<typeof tcbInfoSchema>;

const qeIdentitySchema = z.object({
  ...header,
  miscselect: hex,
  miscselectMask: hex,
  ...maskedIdentity,
  isvprodid: z.number().check(z.int()),
  tcbLevels: z.array(isvsvnLevelSchema),
});
export type QeIdentity = z.infer<typeof qeIdentitySchema>;

/** A PCS response: a JSON body and Intel's signature over its exact bytes. */
export interface SignedCollateral<T> {
  body: T;
  signed: Uint8Array;
  /** ECDSA P-256, r ‖ s. */
  signature: Uint8Array;
}

/**
 * Reads a PCS response body (`{"tcbInfo":{…},"signature":"…"}`). The signature covers the bytes of
 * the inner object as served, so they are cut from the text rather than re-serialized.
 */
function readSignedResponse<T>(
  text: string,
  key: 'tcbInfo' | 'enclaveIdentity',
  schema: z.ZodMiniType<T>,
): SignedCollateral<T> {
  let envelope: { [name: string]: unknown; signature?: unknown };
  try {
    envelope = JSON.parse(text) as typeof envelope;
  } catch {
    return refuse(`the ${key} response is not JSON`);
  }
  if (typeof envelope !== 'object' || envelope === null) refuse(`the ${key} response is no JSON object`);
  const { signature } = envelope;
  if (typeof signature !== 'string' || !/^[0-9a-fA-F]{128}$/.test(signature))
    refuse(`the ${key} response has no 64-byte signature`);
  const body = z.safeParse(schema, envelope[key]);
  if (!body.success) refuse(`the ${key} is malformed: ${z.prettifyError(body.error).replace(/\n\s*/g, ' ')}`);
  const served = new RegExp(`^\\s*\\{"${key}":(\\{.*\\}),"signature":"[0-9a-fA-F]+"\\}\\s*$`, 's').exec(text);
  return {
    body: body.data,
    signed: Buffer.from(served?.[1] ?? JSON.stringify(envelope[key])),
    signature: Buffer.from(signature, 'hex'),
  };
}

export const readTcbInfo = (text: string) => readSignedResponse(text, 'tcbInfo', tcbInfoSchema);
export const readQeIdentity = (text: string) => readSignedResponse(text, 'enclaveIdentity', qeIdentitySchema);

const toHex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

/** `value & mask == expected & mask`, bytewise, the masks and values as hex. */
function matchesMasked(value: Uint8Array, identity: { attributes: string; attributesMask: string }): boolean {
  const [expected, mask] = [
    Buffer.from(identity.attributes, 'hex'),
    Buffer.from(identity.attributesMask, 'hex'),
  ];
  if (mask.length !== value.length || expected.length !== value.length) return false;
  return value.every(
    (byte, i) => (byte & (mask[i] as number)) === ((expected[i] as number) & (mask[i] as number)),
  );
}

/** Refuses a QE report that is not the TD QE the identity describes. */
export function assertQeMatches(qe: QeReport, identity: QeIdentity): void {
  if (identity.id !== 'TD_QE') refuse(`the QE identity is for ${identity.id}, not the TD QE`);
  if (toHex(qe.mrSigner) !== identity.mrsigner.toLowerCase())
    refuse(`the QE's MRSIGNER ${toHex(qe.mrSigner)} is not Intel's ${identity.mrsigner.toLowerCase()}`);
  if (qe.isvProdId !== identity.isvprodid)
    refuse(`the QE's ISVPRODID ${qe.isvProdId} is not ${identity.isvprodid}`);
  const miscMask = Buffer.from(identity.miscselectMask, 'hex').readUInt32LE(0);
  const misc = Buffer.from(identity.miscselect, 'hex').readUInt32LE(0);
  if ((qe.miscSelect & miscMask) >>> 0 !== (misc & miscMask) >>> 0)
    refuse(`the QE's MISCSELECT ${qe.miscSelect.toString(16)} does not match the QE identity's`);
  if (!matchesMasked(qe.attributes, identity))
    refuse(`the QE's ATTRIBUTES ${toHex(qe.attributes)} do not match the QE identity's`);
}

/** What the PCK certificate says about the platform (its SGX extension). */
export interface PlatformTcb {
  fmspc: string;
  pceId: string;
  cpuSvn: Uint8Array;
  pceSvn: number;
}

/** Reads a PCK certificate's SGX extension (with @phala/dcap-qvl's parser); throws without one. */
export function platformOf(pckLeaf: X509Certificate): PlatformTcb {
  const extension = getIntelExtension(pckLeaf.raw);
  return {
    fmspc: toHex(getFmspc(extension)),
    pceId: toHex(findExtension([PCEID], extension)),
    cpuSvn: getCpuSvn(extension),
    pceSvn: getPceSvn(extension),
  };
}

export interface TcbEvaluation {
  status: TcbStatus;
  advisoryIds: string[];
  /** Each component's status, e.g. `platform UpToDate`, `QE UpToDate`, for the check's detail. */
  components: string[];
}

interface Level {
  tcbStatus: TcbStatus;
  advisoryIDs?: string[] | undefined;
}

const atLeast = (actual: Uint8Array, required: readonly { svn: number }[], from = 0): boolean =>
  required.every((component, i) => i < from || (actual[i] as number) >= component.svn);

/** The first (highest) level whose ISVSVN the given one reaches. */
function isvsvnLevel(
  levels: readonly (Level & { tcb: { isvsvn: number } })[],
  isvsvn: number,
  what: string,
): Level {
  return (
    levels.find((level) => level.tcb.isvsvn <= isvsvn) ??
    refuse(`the ${what} ISVSVN ${isvsvn} is below every TCB level Intel lists`)
  );
}

/**
 * The platform's TCB level: the first whose SGX components the PCK certificate's CPUSVN reaches,
 * whose PCESVN it reaches, and whose TDX components the TD's TEE_TCB_SVN reaches (from index 2 when
 * TEE_TCB_SVN[1], the TDX module's major version, is set: the module is then judged by its identity).
 */
function platformLevel(tcbInfo: TcbInfo, platform: PlatformTcb, teeTcbSvn: Uint8Array): Level {
  const moduleJudgedApart = (teeTcbSvn[1] as number) > 0;
  return (
    tcbInfo.tcbLevels.find(
      (level) =>
        atLeast(platform.cpuSvn, level.tcb.sgxtcbcomponents) &&
        platform.pceSvn >= level.tcb.pcesvn &&
        atLeast(teeTcbSvn, level.tcb.tdxtcbcomponents, moduleJudgedApart ? 2 : 0),
    ) ??
    refuse(
      `the platform's TCB (CPUSVN ${toHex(platform.cpuSvn)}, PCESVN ${platform.pceSvn}, TEE_TCB_SVN ${toHex(teeTcbSvn)}) is below every TCB level Intel lists`,
    )
  );
}

/** TDX 1.5: the module's TCB level under its identity `TDX_<major version>`. */
function moduleLevel(tcbInfo: TcbInfo, td: TdReport): Level {
  const [minor, major] = [td.teeTcbSvn[0] as number, td.teeTcbSvn[1] as number];
  const id = `TDX_${major.toString(16).padStart(2, '0')}`.toUpperCase();
  const identity =
    tcbInfo.tdxModuleIdentities?.find((candidate) => candidate.id.toUpperCase() === id) ??
    refuse(`the TCB info lists no TDX module identity ${id}`);
  if (
    toHex(td.mrSignerSeam) !== identity.mrsigner.toLowerCase() ||
    !matchesMasked(td.seamAttributes, identity)
  )
    refuse(`the TDX module's signer or attributes do not match ${id} of the TCB info`);
  return isvsvnLevel(identity.tcbLevels, minor, `TDX module ${id}`);
}

/** The TCB status of the platform, its TDX module and its QE, the worst of them; refuses a mismatch. */
export function evaluateTcb(
  tcbInfo: TcbInfo,
  qeIdentity: QeIdentity,
  platform: PlatformTcb,
  td: TdReport,
  qe: QeReport,
): TcbEvaluation {
  if (tcbInfo.fmspc.toLowerCase() !== platform.fmspc)
    refuse(
      `the TCB info is for FMSPC ${tcbInfo.fmspc.toLowerCase()}, the PCK certificate's platform is FMSPC ${platform.fmspc}`,
    );
  if (tcbInfo.pceId.toLowerCase() !== platform.pceId)
    refuse(`the TCB info is for PCEID ${tcbInfo.pceId}, the PCK certificate's is ${platform.pceId}`);
  const seam = tcbInfo.tdxModule;
  if (
    seam !== undefined &&
    (toHex(td.mrSignerSeam) !== seam.mrsigner.toLowerCase() || !matchesMasked(td.seamAttributes, seam))
  )
    refuse(
      `the TDX module's MRSIGNERSEAM ${toHex(td.mrSignerSeam)} or SEAM attributes do not match the TCB info`,
    );
  const levels: [string, Level][] = [['platform', platformLevel(tcbInfo, platform, td.teeTcbSvn)]];
  if ((td.teeTcbSvn[1] as number) > 0) levels.push(['TDX module', moduleLevel(tcbInfo, td)]);
  levels.push(['QE', isvsvnLevel(qeIdentity.tcbLevels, qe.isvSvn, 'QE')]);
  const worst = levels.reduce((a, b) =>
    tcbStatusSeverity(b[1].tcbStatus) > tcbStatusSeverity(a[1].tcbStatus) ? b : a,
  );
  return {
    status: worst[1].tcbStatus,
    advisoryIds: [...new Set(levels.flatMap(([, level]) => level.advisoryIDs ?? []))],
    components: levels.map(([name, level]) => `${name} ${level.tcbStatus}`),
  };
}
