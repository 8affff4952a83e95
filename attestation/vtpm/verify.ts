import { createHash, createPublicKey, verify as verifySignature, type KeyObject } from 'node:crypto';
import type {
  AttestationEvidenceV2,
  EvidenceCheck,
  EvidenceVerification,
  ExpectedEvidence,
} from '@sigil/plugin-api';
import {
  algorithmName,
  parseEccPublic,
  parseEcdsaSignature,
  parseQuoteAttest,
  TPM_ALG,
  TPM_ECC_NIST_P256,
  TPM_RH_ENDORSEMENT,
  TPMA_OBJECT,
  type EccPublic,
  type QuoteAttest,
} from './tpm-structures.ts';

/**
 * The verifier of vTPM evidence: a TPM2_Quote by an attestation key (AK) over the caller's
 * REPORT_DATA and the sha256 PCR bank. Pure (node:crypto and the structure parsers), so the offline
 * bundle script carries it as it is.
 *
 * What it cannot check: that the AK belongs to a real TPM. There is no vendor root here: cloud vTPMs
 * and swtpm have no EK certificate chain this project could ship, so the AK is trusted on first use
 * unless the relying party pins it (`ak-trusted`).
 */

export const VTPM_PLATFORM = 'vtpm';
/** The PCR bank quoted and sealed to. */
export const PCR_BANK = 'sha256';
const DIGEST_BYTES = 32;
const REPORT_DATA_BYTES = 64;

export interface VtpmVerifyOptions {
  /**
   * Hex SHA-256 of the SubjectPublicKeyInfo (DER) of each AK the relying party trusts. Empty or absent:
   * any AK whose quote verifies is taken on first use, and `ak-trusted` says so.
   */
  trustedAkFingerprints?: readonly string[];
}

const sha256 = (...parts: Uint8Array[]): Buffer => {
  const hash = createHash('sha256');
  for (const part of parts) hash.update(part);
  return hash.digest();
};
const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');
const u16 = (value: number): Buffer => Buffer.from([value >> 8, value & 0xff]);
const u32 = (value: number): Buffer => {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(value);
  return bytes;
};

/** The `pcrs` collateral: `{"sha256":{"0":"<hex>",…}}`, PCR index to lowercase hex value. */
export function encodePcrs(values: ReadonlyMap<number, Uint8Array>): string {
  const bank: Record<string, string> = {};
  for (const [index, value] of [...values].sort(([a], [b]) => a - b)) bank[String(index)] = hex(value);
  return JSON.stringify({ [PCR_BANK]: bank });
}

/** Reads the `pcrs` collateral; throws saying what is wrong with it. */
export function decodePcrs(text: string | undefined): Map<number, Buffer> {
  if (text === undefined) throw new Error('the evidence has no pcrs collateral');
  const parsed = JSON.parse(text) as unknown;
  const bank = (parsed as Record<string, unknown> | null)?.[PCR_BANK];
  if (typeof bank !== 'object' || bank === null)
    throw new Error(`the pcrs collateral has no ${PCR_BANK} bank`);
  const values = new Map<number, Buffer>();
  for (const [index, value] of Object.entries(bank)) {
    if (!/^\d+$/.test(index) || typeof value !== 'string' || !/^([0-9a-f]{2})+$/.test(value))
      throw new Error(
        `the pcrs collateral's entry ${JSON.stringify(index)} is not a PCR index with a hex value`,
      );
    values.set(Number(index), Buffer.from(value, 'hex'));
  }
  return values;
}

/** The fingerprint relying parties pin an AK by: hex SHA-256 of its SubjectPublicKeyInfo DER. */
export function akFingerprint(key: KeyObject): string {
  return hex(sha256(key.export({ type: 'spki', format: 'der' })));
}

/** An AK as parsed from `akPublic`, or why it is not one a quote can be trusted from. */
type ParsedAk = { area: EccPublic; key: KeyObject; fingerprint: string } | { problem: string };

function parseAk(akPublic: string | undefined): ParsedAk {
  if (akPublic === undefined) return { problem: 'the evidence has no akPublic collateral' };
  let area: EccPublic;
  try {
    area = parseEccPublic(Buffer.from(akPublic, 'base64'));
  } catch (err) {
    return { problem: `akPublic is not a TPM2B_PUBLIC of an ECC key: ${(err as Error).message}` };
  }
  const attributes = area.objectAttributes;
  const has = (bit: number) => (attributes & bit) !== 0;
  // A restricted signing key signs only digests the TPM made itself (beginning TPM_GENERATED_VALUE):
  // an unrestricted one would sign a forged TPMS_ATTEST as readily as a real one.
  if (!has(TPMA_OBJECT.restricted) || !has(TPMA_OBJECT.sign) || has(TPMA_OBJECT.decrypt))
    return {
      problem: 'the AK is not a restricted signing key, so it could sign a TPMS_ATTEST it did not make',
    };
  if (!has(TPMA_OBJECT.fixedTPM) || !has(TPMA_OBJECT.sensitiveDataOrigin))
    return {
      problem: 'the AK is not fixedTPM with a TPM-generated private key: it may exist outside the TPM',
    };
  if (area.curveId !== TPM_ECC_NIST_P256)
    return { problem: `the AK's curve is 0x${area.curveId.toString(16)}, not NIST P-256` };
  if (area.nameAlg !== TPM_ALG.sha256)
    return { problem: `the AK's name algorithm is ${algorithmName(area.nameAlg)}, not sha256` };
  try {
    const key = createPublicKey({
      key: {
        kty: 'EC',
        crv: 'P-256',
        x: Buffer.from(area.x).toString('base64url'),
        y: Buffer.from(area.y).toString('base64url'),
      },
      format: 'jwk',
    });
    return { area, key, fingerprint: akFingerprint(key) };
  } catch (err) {
    return { problem: `the AK's point is not on P-256: ${(err as Error).message}` };
  }
}

/** The fingerprint and PEM of an AK given as its `TPM2B_PUBLIC`; throws when it is no AK to trust. */
export function describeAk(akPublic: Uint8Array): { fingerprint: string; pem: string } {
  const ak = parseAk(Buffer.from(akPublic).toString('base64'));
  if ('problem' in ak) throw new Error(ak.problem);
  return { fingerprint: ak.fingerprint, pem: ak.key.export({ type: 'spki', format: 'pem' }) as string };
}

/** The AK's qualified name as a primary key of the endorsement hierarchy (Part 1, 16: names). */
function primaryQualifiedName(area: EccPublic): Buffer {
  const name = Buffer.concat([u16(area.nameAlg), sha256(area.marshalled)]);
  return Buffer.concat([u16(area.nameAlg), sha256(u32(TPM_RH_ENDORSEMENT), name)]);
}

function signatureCheck(report: Buffer, signature: string | undefined, key: KeyObject): EvidenceCheck {
  const failed = (detail: string) => ({ id: 'signature', ok: false, detail });
  if (signature === undefined) return failed('the evidence has no signature collateral');
  let parsed;
  try {
    parsed = parseEcdsaSignature(Buffer.from(signature, 'base64'));
  } catch (err) {
    return failed((err as Error).message);
  }
  if (parsed.hashAlg !== TPM_ALG.sha256)
    return failed(`the signature's hash is ${algorithmName(parsed.hashAlg)}, not sha256`);
  if (parsed.r.length > DIGEST_BYTES || parsed.s.length > DIGEST_BYTES)
    return failed('the signature is not a P-256 ECDSA signature (r or s longer than 32 bytes)');
  const pad = (part: Uint8Array) => Buffer.concat([Buffer.alloc(DIGEST_BYTES - part.length), part]);
  const valid = verifySignature(
    'sha256',
    report,
    { key, dsaEncoding: 'ieee-p1363' },
    Buffer.concat([pad(parsed.r), pad(parsed.s)]),
  );
  return valid
    ? { id: 'signature', ok: true, detail: 'ECDSA P-256/SHA-256 signature of the AK over the TPMS_ATTEST' }
    : failed('the ECDSA signature does not verify with the AK over this TPMS_ATTEST');
}

/** The quoted PCRs with their values, or why the values given do not make the quoted digest. */
function quotedPcrs(
  attest: QuoteAttest,
  pcrsCollateral: string | undefined,
): { values: Map<number, Buffer>; check: EvidenceCheck } {
  const failed = (detail: string, values = new Map<number, Buffer>()) => ({
    values,
    check: { id: 'pcr-digest', ok: false, detail },
  });
  const [selection, ...others] = attest.pcrSelections;
  if (selection === undefined || others.length > 0 || selection.hashAlg !== TPM_ALG.sha256)
    return failed(
      `the quote selects ${attest.pcrSelections.map((s) => algorithmName(s.hashAlg)).join(', ') || 'no bank'}, not the sha256 bank alone`,
    );
  let given: Map<number, Buffer>;
  try {
    given = decodePcrs(pcrsCollateral);
  } catch (err) {
    return failed((err as Error).message);
  }
  const values = new Map<number, Buffer>();
  for (const index of selection.pcrs) {
    const value = given.get(index);
    if (value?.length === DIGEST_BYTES) values.set(index, value);
  }
  const missing = selection.pcrs.filter((index) => !values.has(index));
  if (missing.length > 0)
    return failed(`the pcrs collateral lacks a sha256 value for quoted PCR ${missing.join(', ')}`, values);
  const digest = sha256(...selection.pcrs.map((index) => values.get(index) as Buffer));
  if (!digest.equals(attest.pcrDigest))
    return failed(
      `the PCR values given digest to ${hex(digest)}, the quote's pcrDigest is ${hex(attest.pcrDigest)}: a value was changed`,
      values,
    );
  return {
    values,
    check: {
      id: 'pcr-digest',
      ok: true,
      detail: `the values of sha256 PCR ${selection.pcrs.join(',')} make the quoted pcrDigest`,
    },
  };
}

function akTrustedCheck(fingerprint: string | undefined, trusted: readonly string[]): EvidenceCheck {
  const id = 'ak-trusted';
  if (fingerprint === undefined) return { id, ok: false, detail: 'no usable AK to trust' };
  if (trusted.length === 0)
    return {
      id,
      ok: true,
      detail: `AK ${fingerprint} taken on first use: no AK is pinned and there is no EK certificate chain to a vendor root`,
    };
  return trusted.map((entry) => entry.toLowerCase()).includes(fingerprint)
    ? { id, ok: true, detail: `AK ${fingerprint} is a pinned one` }
    : { id, ok: false, detail: `AK ${fingerprint} is none of the ${trusted.length} pinned` };
}

function reportDataCheck(extraData: Uint8Array, expected: Uint8Array): EvidenceCheck {
  const id = 'report-data';
  if (expected.length !== REPORT_DATA_BYTES)
    return { id, ok: false, detail: `the expected REPORT_DATA is ${expected.length} bytes, not 64` };
  // 64 bytes: REPORT_DATA itself; 32: its SHA-256, for TPMs whose qualifying data holds no 64 bytes.
  const [bound, how] =
    extraData.length === REPORT_DATA_BYTES
      ? [Buffer.from(expected), 'the qualifying data is the expected REPORT_DATA']
      : [sha256(expected), 'the qualifying data is the SHA-256 of the expected REPORT_DATA'];
  return Buffer.from(extraData).equals(bound)
    ? { id, ok: true, detail: how }
    : {
        id,
        ok: false,
        detail: `the quote's qualifying data ${hex(extraData)} is not the expected REPORT_DATA${extraData.length === REPORT_DATA_BYTES ? '' : "'s SHA-256"}`,
      };
}

function measurementChecks(
  expected: Readonly<Record<string, string>>,
  values: ReadonlyMap<number, Buffer>,
): EvidenceCheck[] {
  return Object.entries(expected).map(([name, want]) => {
    const index = /^pcr(\d+)$/.exec(name)?.[1];
    const value = index === undefined ? undefined : values.get(Number(index));
    if (index === undefined)
      return { id: 'measurement', ok: false, detail: `${name} is no measurement of a TPM (pcr<N>)` };
    if (value === undefined)
      return { id: 'measurement', ok: false, detail: `${name} is not among the PCRs quoted` };
    return hex(value) === want.toLowerCase()
      ? { id: 'measurement', ok: true, detail: `${name} (sha256) is the expected value` }
      : { id: 'measurement', ok: false, detail: `${name} (sha256) is ${hex(value)}, expected ${want}` };
  });
}

/**
 * Verifies vTPM evidence offline; never throws on bad evidence. The caller checks the platform first
 * (evidence of another platform is not this verifier's to judge).
 */
export function verifyVtpmEvidence(
  evidence: AttestationEvidenceV2,
  expected: ExpectedEvidence = {},
  options: VtpmVerifyOptions = {},
): EvidenceVerification {
  try {
    return verifyQuote(evidence, expected, options);
  } catch (err) {
    // Evidence of the wrong shape altogether (a report that is no string, collateral that is no record).
    return {
      platform: VTPM_PLATFORM,
      verified: false,
      checks: [{ id: 'evidence', ok: false, detail: `the evidence is malformed: ${(err as Error).message}` }],
    };
  }
}

function verifyQuote(
  evidence: AttestationEvidenceV2,
  expected: ExpectedEvidence,
  options: VtpmVerifyOptions,
): EvidenceVerification {
  const report = Buffer.from(evidence.report, 'base64');
  let attest: QuoteAttest;
  try {
    attest = parseQuoteAttest(report);
  } catch (err) {
    return {
      platform: VTPM_PLATFORM,
      verified: false,
      checks: [{ id: 'report', ok: false, detail: (err as Error).message }],
    };
  }
  const collateral = evidence.collateral ?? {};
  const checks: EvidenceCheck[] = [
    { id: 'report', ok: true, detail: 'a TPMS_ATTEST of a quote (TPM_GENERATED_VALUE, TPM_ST_ATTEST_QUOTE)' },
  ];
  const ak = parseAk(collateral.akPublic);
  if ('problem' in ak) {
    checks.push(
      { id: 'ak', ok: false, detail: ak.problem },
      { id: 'signature', ok: false, detail: 'no usable AK to check the signature with' },
      { id: 'signer', ok: false, detail: 'no usable AK to compare the signer with' },
    );
  } else {
    const qualifiedName = primaryQualifiedName(ak.area);
    checks.push(
      {
        id: 'ak',
        ok: true,
        detail: 'the AK is a restricted P-256 signing key generated in and fixed to its TPM',
      },
      signatureCheck(report, collateral.signature, ak.key),
      qualifiedName.equals(attest.qualifiedSigner)
        ? {
            id: 'signer',
            ok: true,
            detail: "the quote's signer is the AK, a primary key of the endorsement hierarchy",
          }
        : {
            id: 'signer',
            ok: false,
            detail: `the quote's qualifiedSigner ${hex(attest.qualifiedSigner)} is not the AK's qualified name ${hex(qualifiedName)}`,
          },
    );
  }
  const fingerprint = 'problem' in ak ? undefined : ak.fingerprint;
  checks.push(akTrustedCheck(fingerprint, options.trustedAkFingerprints ?? []));
  const pcrs = quotedPcrs(attest, collateral.pcrs);
  checks.push(pcrs.check);
  if (expected.reportData !== undefined) checks.push(reportDataCheck(attest.extraData, expected.reportData));
  if (expected.measurements !== undefined)
    checks.push(...measurementChecks(expected.measurements, pcrs.values));
  return {
    platform: VTPM_PLATFORM,
    verified: checks.every((check) => check.ok),
    checks,
    claims: {
      reportData: hex(attest.extraData),
      measurements: Object.fromEntries([...pcrs.values].map(([index, value]) => [`pcr${index}`, hex(value)])),
      details: {
        firmwareVersion: `0x${attest.firmwareVersion.toString(16).padStart(16, '0')}`,
        clock: {
          clock: Number(attest.clockInfo.clock),
          resetCount: attest.clockInfo.resetCount,
          restartCount: attest.clockInfo.restartCount,
          safe: attest.clockInfo.safe,
        },
        akFingerprint: fingerprint,
        qualifiedSigner: hex(attest.qualifiedSigner),
        pcrBank: PCR_BANK,
        reportDataBinding:
          attest.extraData.length === REPORT_DATA_BYTES ? 'report-data' : 'sha256(report-data)',
      },
    },
  };
}
