import type { AuthDataV4 } from '@phala/dcap-qvl';
import {
  ATTESTATION_KEY_TYPE_ECDSA256_WITH_P256_CURVE,
  PCK_CERT_CHAIN,
  QE_REPORT_CERT,
  TEE_TYPE_TDX,
} from '@phala/dcap-qvl/src/constants.js';
import { BinaryReader, EnclaveReport, Quote } from '@phala/dcap-qvl/src/quote.js';
import { extractCerts } from '@phala/dcap-qvl/src/utils.js';
import { refuse } from './refusal.ts';

/**
 * A TDX quote (v4 or v5) read by @phala/dcap-qvl's parser, in the shape the verifier checks: the
 * signed bytes beside the signature, the QE report's fields beside its raw bytes, the TD report's
 * fields. Pure: bundled into the offline verification script.
 */

export interface TdReport {
  teeTcbSvn: Uint8Array;
  mrSeam: Uint8Array;
  mrSignerSeam: Uint8Array;
  seamAttributes: Uint8Array;
  tdAttributes: Uint8Array;
  xfam: Uint8Array;
  mrTd: Uint8Array;
  mrConfigId: Uint8Array;
  mrOwner: Uint8Array;
  mrOwnerConfig: Uint8Array;
  rtmrs: readonly [Uint8Array, Uint8Array, Uint8Array, Uint8Array];
  reportData: Uint8Array;
  /** TDX 1.5 (a v5 quote's TD report 1.5) only. */
  teeTcbSvn2?: Uint8Array;
  mrServiceTd?: Uint8Array;
}

export interface QeReport {
  /** The 384 bytes the PCK key signed. */
  raw: Uint8Array;
  miscSelect: number;
  attributes: Uint8Array;
  mrSigner: Uint8Array;
  isvProdId: number;
  isvSvn: number;
  reportData: Uint8Array;
}

export interface TdxQuote {
  version: number;
  qeSvn: number;
  pceSvn: number;
  /** Header and TD report: what the attestation key signed. */
  signed: Uint8Array;
  /** ECDSA P-256, r ‖ s. */
  signature: Uint8Array;
  /** P-256 public key, x ‖ y. */
  attestationKey: Uint8Array;
  td: TdReport;
  qeReport: QeReport;
  qeReportSignature: Uint8Array;
  qeAuthData: Uint8Array;
  /** The certification data type inside the QE report certification data: 5 is a PCK chain. */
  certificationDataType: number;
  /** The PCK chain carried by the quote (type 5), leaf first, as PEM; empty for other types. */
  pckChain: readonly string[];
}

/** PEM of a certificate's DER, unparsed: a damaged certificate is the chain check's to refuse. */
function derToPem(der: Uint8Array): string {
  const lines =
    Buffer.from(der)
      .toString('base64')
      .match(/.{1,64}/g) ?? [];
  return `-----BEGIN CERTIFICATE-----\n${lines.join('\n')}\n-----END CERTIFICATE-----\n`;
}

function readQeReport(raw: Uint8Array): QeReport {
  const report = EnclaveReport.decode(new BinaryReader(raw));
  return {
    raw,
    miscSelect: report.miscSelect,
    attributes: report.attributes,
    mrSigner: report.mrSigner,
    isvProdId: report.isvProdId,
    isvSvn: report.isvSvn,
    reportData: report.reportData,
  };
}

/** Reads a TDX quote; refuses anything else, saying why. */
export function parseTdxQuote(raw: Uint8Array): TdxQuote {
  let quote: Quote;
  try {
    quote = Quote.parse(raw);
  } catch (error) {
    return refuse(`not a DCAP quote: ${(error as Error).message}`);
  }
  const { header } = quote;
  if (header.version !== 4 && header.version !== 5) refuse(`quote version ${header.version}, not 4 or 5`);
  if (header.teeType !== TEE_TYPE_TDX) refuse(`TEE type 0x${header.teeType.toString(16)}, not TDX (0x81)`);
  if (header.attestationKeyType !== ATTESTATION_KEY_TYPE_ECDSA256_WITH_P256_CURVE)
    refuse(`attestation key type ${header.attestationKeyType}, not ECDSA P-256`);
  const td10 = quote.report.asTd10();
  if (td10 === null) refuse('the quote carries no TD report');
  const td15 = quote.report.asTd15();
  if (quote.authData.version !== 4) refuse('auth data is not of version 4');
  const auth = quote.authData.data as AuthDataV4;
  if (auth.certificationData.certType !== QE_REPORT_CERT)
    refuse(
      `certification data type ${auth.certificationData.certType}, not QE report certification data (6)`,
    );
  const inner = auth.qeReportData;
  const certificationDataType = inner.certificationData.certType;
  const pckChain =
    certificationDataType === PCK_CERT_CHAIN
      ? extractCerts(inner.certificationData.body).map((der) => derToPem(der))
      : [];
  return {
    version: header.version,
    qeSvn: header.qeSvn,
    pceSvn: header.pceSvn,
    signed: raw.subarray(0, quote.signedLength()),
    signature: auth.ecdsaSignature,
    attestationKey: auth.ecdsaAttestationKey,
    td: {
      teeTcbSvn: td10.teeTcbSvn,
      mrSeam: td10.mrSeam,
      mrSignerSeam: td10.mrSignerSeam,
      seamAttributes: td10.seamAttributes,
      tdAttributes: td10.tdAttributes,
      xfam: td10.xfam,
      mrTd: td10.mrTd,
      mrConfigId: td10.mrConfigId,
      mrOwner: td10.mrOwner,
      mrOwnerConfig: td10.mrOwnerConfig,
      rtmrs: [td10.rtMr0, td10.rtMr1, td10.rtMr2, td10.rtMr3],
      reportData: td10.reportData,
      ...(td15 === null ? {} : { teeTcbSvn2: td15.teeTcbSvn2, mrServiceTd: td15.mrServiceTd }),
    },
    qeReport: readQeReport(inner.qeReport),
    qeReportSignature: inner.qeReportSignature,
    qeAuthData: inner.qeAuthData,
    certificationDataType,
    pckChain,
  };
}
