import { createHash, X509Certificate } from 'node:crypto';
import type {
  AttestationEvidenceV2,
  EvidenceCheck,
  EvidenceVerification,
  ExpectedEvidence,
} from '@sigil/plugin-api';
import {
  assertNotRevoked,
  commonName,
  currentRevocationList,
  INTEL_SGX_ROOT_CA,
  p256Key,
  verifiesP1363,
  verifyChain,
  type VerifiedChain,
} from './certificates.ts';
import { TDX_PLATFORM } from './platform.ts';
import { parseTdxQuote, type TdxQuote } from './quote.ts';
import { Refusal, refuse } from './refusal.ts';
import {
  assertQeMatches,
  evaluateTcb,
  platformOf,
  readQeIdentity,
  readTcbInfo,
  type PlatformTcb,
  type QeIdentity,
  type SignedCollateral,
  type TcbEvaluation,
  type TcbInfo,
  type TcbStatus,
} from './tcb.ts';

/**
 * The TDX verifier: a quote (v4 or v5) and its collateral, judged offline, one check per thing
 * checked. @phala/dcap-qvl parses the quote and the PCK certificate's SGX extension and supplies
 * Intel's root; the checks themselves are written here because its verify() stops at the first
 * failure (a relying party here sees every check), does not verify CRL signatures or dates, ignores
 * TDX module identities, and insists on SEPT_VE_DISABLE, which is a deployment's policy, not a
 * property of genuine evidence. Imports node:crypto, zod/mini and @phala/dcap-qvl's parsing
 * modules only: no I/O, so it bundles into the offline verification script.
 *
 * Collateral, by name (see README.md): `tcbInfo` and `qeIdentity` (PCS response bodies, JSON),
 * `tcbInfoIssuerChain` and `qeIdentityIssuerChain` (PEM), `pckCrl` and `rootCaCrl` (base64 DER).
 */

export { TDX_PLATFORM };

export const MEASUREMENTS = ['mrtd', 'rtmr0', 'rtmr1', 'rtmr2', 'rtmr3'] as const;

/** TD_ATTRIBUTES bit 0, TUD.DEBUG: the host can read and change the TD's state. */
const TD_DEBUG = 0x01;

export interface TdxVerifierOptions {
  /**
   * TCB statuses besides UpToDate that pass the `tcb` check (SWHardeningNeeded,
   * ConfigurationNeeded, …); OutOfDate and Revoked never pass.
   */
  acceptedTcbStatuses?: readonly TcbStatus[];
  /** The root every chain must end in: Intel's SGX Root CA unless a test brings its own PKI. */
  trustedRoot?: X509Certificate;
}

const NEVER_ACCEPTED: readonly TcbStatus[] = ['OutOfDate', 'OutOfDateConfigurationNeeded', 'Revoked'];

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

/** Runs one check: its detail on success, the refusal's reason (or the error's) on failure. */
function checked<T>(
  checks: EvidenceCheck[],
  id: string,
  run: () => { detail: string; value?: T },
): T | undefined {
  try {
    const { detail, value } = run();
    checks.push({ id, ok: true, detail });
    return value;
  } catch (error) {
    const reason = error instanceof Refusal ? error.message : `cannot check: ${(error as Error).message}`;
    checks.push({ id, ok: false, detail: reason });
    return undefined;
  }
}

/** Verifies a PEM chain once per verification (TCB info and QE identity share their issuer chain). */
type ChainVerifier = (pemText: string) => VerifiedChain;

function chainVerifier(root: X509Certificate, at: Date): ChainVerifier {
  const verified = new Map<string, VerifiedChain>();
  return (pemText) => {
    const chain = verified.get(pemText) ?? verifyChain(splitPem(pemText), root, at);
    verified.set(pemText, chain);
    return chain;
  };
}

function signedByIntel<T extends { issueDate: string; nextUpdate: string }>(
  collateral: Readonly<Record<string, string>>,
  name: 'tcbInfo' | 'qeIdentity',
  read: (text: string) => SignedCollateral<T>,
  chainOf: ChainVerifier,
  at: Date,
): { detail: string; value: T } {
  const text = collateral[name] ?? refuse(`the collateral has no ${name}`);
  const response = read(text);
  const chain = chainOf(
    collateral[`${name}IssuerChain`] ?? refuse(`the collateral has no ${name}IssuerChain`),
  );
  if (commonName(chain.leaf) !== 'Intel SGX TCB Signing')
    refuse(`${name} is signed by ${commonName(chain.leaf)}, not Intel SGX TCB Signing`);
  if (!verifiesP1363(chain.leaf.publicKey, response.signed, response.signature))
    refuse(`the ${name} signature does not verify with ${commonName(chain.leaf)}`);
  const [issued, next] = [new Date(response.body.issueDate), new Date(response.body.nextUpdate)];
  if (at < issued) refuse(`${name} was issued ${issued.toISOString()}, after ${at.toISOString()}`);
  if (at > next) refuse(`${name} was due for renewal ${next.toISOString()}, before ${at.toISOString()}`);
  return {
    detail: `${name} is signed by ${chain.certificates.map(commonName).join(' → ')} and current at ${at.toISOString()} (next update ${next.toISOString()})`,
    value: response.body,
  };
}

export const splitPem = (text: string): string[] =>
  text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];

/** The certificates that signed the TCB info and QE identity (leaves of their issuer chains). */
const collateralSigners = (collateral: Readonly<Record<string, string>>): X509Certificate[] =>
  [
    ...new Set(
      ['tcbInfoIssuerChain', 'qeIdentityIssuerChain'].map((name) => splitPem(collateral[name] ?? '')[0]),
    ),
  ]
    .filter((pem) => pem !== undefined)
    .map((pem) => new X509Certificate(pem));

const crlBytes = (collateral: Readonly<Record<string, string>>, name: string): Uint8Array =>
  Buffer.from(collateral[name] ?? refuse(`the collateral has no ${name}`), 'base64');

/** Judges TDX evidence; never throws (the plugin refuses other platforms before calling this). */
export function verifyTdxEvidence(
  evidence: AttestationEvidenceV2,
  expected: ExpectedEvidence = {},
  options: TdxVerifierOptions = {},
): EvidenceVerification {
  const checks: EvidenceCheck[] = [];
  const at = expected.at ?? new Date();
  const root = options.trustedRoot ?? INTEL_SGX_ROOT_CA;
  const collateral = evidence.collateral ?? {};
  const quote = checked(checks, 'quote', () => {
    const parsed = parseTdxQuote(Buffer.from(evidence.report, 'base64'));
    return { detail: `a TDX quote, version ${parsed.version}, ECDSA P-256 attestation key`, value: parsed };
  });
  if (quote === undefined) return { platform: TDX_PLATFORM, verified: false, checks };

  checked(checks, 'signature', () => {
    if (!verifiesP1363(p256Key(quote.attestationKey), quote.signed, quote.signature))
      refuse('the quote signature does not verify with its attestation key');
    return { detail: 'the header and TD report are signed by the quote’s attestation key (ECDSA P-256)' };
  });

  // A quote of certification data type 5 carries its PCK chain; for other types the evidence does.
  const pemChain = quote.pckChain.length > 0 ? quote.pckChain : evidence.certificates;
  const pck = checked<VerifiedChain>(checks, 'chain', () => {
    const chain = verifyChain(pemChain, root, at);
    return {
      detail: `${chain.certificates.map(commonName).join(' → ')}, each valid at ${at.toISOString()}`,
      value: chain,
    };
  });
  let platform: PlatformTcb | undefined;
  let platformUnreadable = 'no verified PCK certificate to read the platform’s TCB from';
  try {
    if (pck !== undefined) platform = platformOf(pck.leaf);
  } catch (error) {
    platformUnreadable = `the PCK certificate's SGX extension cannot be read (${(error as Error).message})`;
  }

  checked(checks, 'qe-report', () => {
    if (pck === undefined) refuse('no verified PCK certificate to check the QE report with');
    if (!verifiesP1363(pck.leaf.publicKey, quote.qeReport.raw, quote.qeReportSignature))
      refuse('the QE report is not signed by the PCK certificate’s key');
    return { detail: 'the quoting enclave’s report is signed by the PCK key' };
  });

  checked(checks, 'qe-report-data', () => {
    const digest = createHash('sha256').update(quote.attestationKey).update(quote.qeAuthData).digest();
    const bound = Buffer.concat([digest, Buffer.alloc(32)]);
    if (!bound.equals(Buffer.from(quote.qeReport.reportData)))
      refuse(
        'the QE report data is not SHA-256(attestation key ‖ QE auth data) ‖ zeros: the attestation key is not the QE’s',
      );
    return { detail: 'the QE report binds the attestation key and the QE auth data' };
  });

  checked(checks, 'revocation', () => {
    if (pck === undefined) refuse('no verified PCK chain to check revocation of');
    const pckCrl = currentRevocationList(crlBytes(collateral, 'pckCrl'), pck.leafIssuer, at, 'PCK CRL');
    const rootCrl = currentRevocationList(crlBytes(collateral, 'rootCaCrl'), root, at, 'root CA CRL');
    assertNotRevoked(pck.leaf, pckCrl, 'PCK CRL');
    const issuedByRoot = [...pck.certificates.slice(1, -1), ...collateralSigners(collateral)];
    for (const certificate of issuedByRoot) assertNotRevoked(certificate, rootCrl, 'root CA CRL');
    return {
      detail: `${commonName(pck.leaf)} is not on the PCK CRL, ${[...new Set(issuedByRoot.map(commonName))].join(' and ')} not on the root CA CRL (both CRLs signed and current)`,
    };
  });

  const chainOf = chainVerifier(root, at);
  const tcbInfo = checked<TcbInfo>(checks, 'tcb-info', () => {
    const signed = signedByIntel(collateral, 'tcbInfo', readTcbInfo, chainOf, at);
    if (signed.value.id !== 'TDX' || signed.value.version < 3)
      refuse(`the TCB info is ${signed.value.id} version ${signed.value.version}, not TDX version 3`);
    return signed;
  });
  const qeIdentity = checked<QeIdentity>(checks, 'qe-identity', () => {
    const signed = signedByIntel(collateral, 'qeIdentity', readQeIdentity, chainOf, at);
    assertQeMatches(quote.qeReport, signed.value);
    return {
      ...signed,
      detail: `the QE is Intel’s TD QE (MRSIGNER, ISVPRODID, attributes); ${signed.detail}`,
    };
  });

  const accepted = new Set<TcbStatus>(['UpToDate', ...(options.acceptedTcbStatuses ?? [])]);
  const tcb = checked<TcbEvaluation>(checks, 'tcb', () => {
    if (platform === undefined) refuse(platformUnreadable);
    if (tcbInfo === undefined || qeIdentity === undefined)
      refuse('the TCB cannot be judged without authentic, current TCB info and QE identity');
    const evaluation = evaluateTcb(tcbInfo, qeIdentity, platform, quote.td, quote.qeReport);
    const summary = `TCB ${evaluation.status} (${evaluation.components.join(', ')})${evaluation.advisoryIds.length > 0 ? `, advisories ${evaluation.advisoryIds.join(' ')}` : ''}`;
    if (NEVER_ACCEPTED.includes(evaluation.status) || !accepted.has(evaluation.status))
      refuse(`${summary}: accepted are ${[...accepted].join(', ')}`);
    return { detail: summary, value: evaluation };
  });

  checked(checks, 'debug', () => {
    if (((quote.td.tdAttributes[0] as number) & TD_DEBUG) !== 0)
      refuse('the TD is a debug TD (TD_ATTRIBUTES.TUD.DEBUG set): the host can read and change its state');
    return { detail: 'the TD is not a debug TD (TD_ATTRIBUTES bit 0 clear)' };
  });

  const measurements = measurementsOf(quote);
  if (expected.reportData !== undefined) {
    const want = hex(expected.reportData);
    checked(checks, 'report-data', () => {
      if (hex(quote.td.reportData) !== want)
        refuse(`REPORT_DATA is ${hex(quote.td.reportData)}, expected ${want}`);
      return { detail: 'REPORT_DATA is the expected 64 bytes' };
    });
  }
  for (const [name, value] of Object.entries(expected.measurements ?? {})) {
    checked(checks, `measurement.${name}`, () => {
      const actual =
        measurements[name] ??
        refuse(`a TDX quote has no measurement ${name} (it has ${MEASUREMENTS.join(', ')})`);
      if (actual !== value.toLowerCase()) refuse(`${name} is ${actual}, expected ${value.toLowerCase()}`);
      return { detail: `${name} is the expected ${actual}` };
    });
  }

  return {
    platform: TDX_PLATFORM,
    verified: checks.every((check) => check.ok),
    checks,
    claims: {
      reportData: hex(quote.td.reportData),
      measurements,
      details: detailsOf(quote, platform, tcb),
    },
  };
}

function measurementsOf(quote: TdxQuote): Record<string, string> {
  const [rtmr0, rtmr1, rtmr2, rtmr3] = quote.td.rtmrs.map(hex);
  return { mrtd: hex(quote.td.mrTd), rtmr0, rtmr1, rtmr2, rtmr3 } as Record<string, string>;
}

function detailsOf(
  quote: TdxQuote,
  platform: PlatformTcb | undefined,
  tcb: TcbEvaluation | undefined,
): Record<string, unknown> {
  const { td } = quote;
  return {
    version: quote.version,
    teeTcbSvn: hex(td.teeTcbSvn),
    ...(td.teeTcbSvn2 === undefined ? {} : { teeTcbSvn2: hex(td.teeTcbSvn2) }),
    tcbStatus: tcb?.status,
    advisoryIds: tcb?.advisoryIds,
    fmspc: platform?.fmspc,
    pceSvn: platform?.pceSvn,
    cpuSvn: platform === undefined ? undefined : hex(platform.cpuSvn),
    qeSvn: quote.qeSvn,
    tdAttributes: hex(td.tdAttributes),
    xfam: hex(td.xfam),
    mrSeam: hex(td.mrSeam),
    mrSignerSeam: hex(td.mrSignerSeam),
    seamAttributes: hex(td.seamAttributes),
    mrConfigId: hex(td.mrConfigId),
    mrOwner: hex(td.mrOwner),
    mrOwnerConfig: hex(td.mrOwnerConfig),
    ...(td.mrServiceTd === undefined ? {} : { mrServiceTd: hex(td.mrServiceTd) }),
  };
}
