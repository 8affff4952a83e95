import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import type { AttestationEvidenceV2 } from '@sigil/plugin-api';
import { failWith } from '@sigil/plugin-api/kit';
import type { HttpResponse, ServiceName } from '../../http.ts';
import type { DeploymentContext } from '../context.ts';
import { expectJson } from '../expect.ts';
import { RUNNER_VERIFIERS } from './verifiers.ts';

/**
 * A service's attestation report as the runner judges it: asked for with a fresh nonce of the
 * runner's, its evidence verified by the runner's own verifier of its platform, and REPORT_DATA read
 * from what the verified report says, never from the service's word for it.
 */

export const REPORT_PATH = '/api/attestation/report';
const NONCE_BYTES = 32;
const IDENTITY_BYTES = 16;
const REPORT_DATA_HEX = /^[0-9a-fA-F]{128}$/;

const evidenceSchema = z.looseObject({
  platform: z.string().min(1),
  report: z.string().min(1),
  certificates: z.array(z.string()),
  collateral: z.record(z.string(), z.string()).optional(),
});

/** Sigil's report: `evidence` is null where there is no TEE; `reportData` is the service's own account. */
export const reportSchema = z.looseObject({
  reportData: z.string().optional(),
  evidence: evidenceSchema.nullable(),
});

export type AttestationReport = z.infer<typeof reportSchema>;

/** What the runner can establish from one report. */
export type ReportReading =
  | { kind: 'no-evidence' }
  | { kind: 'unverifiable'; platform: string }
  | { kind: 'refused'; platform: string; reason: string }
  /** Verified, and REPORT_DATA[0:32] is the runner's nonce. */
  | { kind: 'bound'; platform: string; reportData: Buffer };

/** Why a requirement of the `tee` group fails on a deployment without a TEE. */
export const noTee = (service: ServiceName): string =>
  `the ${service} has no TEE: its report carries no evidence (evidence null), so nothing binds REPORT_DATA; a development deployment leaves this out with --skip tee`;

export const freshNonce = (): Buffer => randomBytes(NONCE_BYTES);

/** REPORT_DATA[32:48] in hex: the identity a service binds beside the nonce (the runtime's JWKS hash). */
export const boundIdentity = (reportData: Buffer): string =>
  reportData.subarray(NONCE_BYTES, NONCE_BYTES + IDENTITY_BYTES).toString('hex');

export function requestReport(
  context: DeploymentContext,
  service: ServiceName,
  nonce: Buffer,
): Promise<HttpResponse> {
  return context.http.request({ service, path: `${REPORT_PATH}?nonce=${nonce.toString('hex')}` });
}

export function judgeReport(
  context: DeploymentContext,
  report: AttestationReport,
  nonce: Buffer,
): ReportReading {
  const { evidence } = report;
  if (evidence === null) return { kind: 'no-evidence' };
  const { platform } = evidence;
  const verify = RUNNER_VERIFIERS[platform];
  if (verify === undefined) return { kind: 'unverifiable', platform };
  // The service's reportData counts only as what the verifier finds the hardware bound (its
  // report-data check), which matters where a report binds a digest of REPORT_DATA, not the 64 bytes.
  const served =
    report.reportData !== undefined && REPORT_DATA_HEX.test(report.reportData)
      ? Buffer.from(report.reportData, 'hex')
      : undefined;
  const verification = verify(evidence as AttestationEvidenceV2, served ? { reportData: served } : {});
  context.evidence.note(`the runner's ${platform} verification`, {
    verified: verification.verified,
    checks: verification.checks,
  });
  const refused = (reason: string): ReportReading => ({ kind: 'refused', platform, reason });
  if (!verification.verified) {
    const failed = verification.checks.filter((check) => !check.ok);
    return refused(
      `the ${platform} evidence does not verify: ${failed.map((check) => `${check.id}: ${check.detail}`).join('; ')}`,
    );
  }
  const claimed = verification.claims?.reportData ?? '';
  const reportData = REPORT_DATA_HEX.test(claimed) ? Buffer.from(claimed, 'hex') : served;
  if (reportData === undefined) {
    return refused(
      `the verified ${platform} report binds a digest of REPORT_DATA, and the report shows no reportData (64 bytes in hex) to check against it`,
    );
  }
  const bound = reportData.subarray(0, NONCE_BYTES);
  if (!bound.equals(nonce)) {
    return refused(
      `REPORT_DATA[0:32] of the verified report is ${bound.toString('hex')}, not the runner's fresh nonce ${nonce.toString('hex')}: the report is not fresh (an old one, or one that does not bind the caller's nonce)`,
    );
  }
  return { kind: 'bound', platform, reportData };
}

/** A report with evidence of the runner's fresh nonce, verified: its REPORT_DATA, or the check fails saying why not. */
export async function verifiedReportData(
  context: DeploymentContext,
  service: ServiceName,
): Promise<{ platform: string; reportData: Buffer }> {
  const nonce = freshNonce();
  const response = await requestReport(context, service, nonce);
  const report = expectJson(response, 200, reportSchema, `GET ${REPORT_PATH} on the ${service}`);
  const reading = judgeReport(context, report, nonce);
  switch (reading.kind) {
    case 'no-evidence':
      return failWith(noTee(service));
    case 'unverifiable':
      return failWith(
        `the runner cannot verify ${reading.platform} evidence (it verifies ${Object.keys(RUNNER_VERIFIERS).join(', ')}), so it cannot tell what REPORT_DATA the ${service}'s report binds`,
      );
    case 'refused':
      return failWith(reading.reason);
    case 'bound':
      return reading;
  }
}
