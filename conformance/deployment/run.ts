import { EvidenceRedactor, notApplicable, runChecks, type CheckResult } from '@sigil/plugin-api/kit';
import { HttpClient } from '../http.ts';
import { buildReport, type Report } from '../report.ts';
import { REQUIREMENTS } from '../requirements.ts';
import type { Exclusion } from '../selection.ts';
import type { DeploymentContext, DeploymentTarget, Requirement } from './context.ts';
import { FeatureProbe } from './features.ts';
import { Payer } from './payer.ts';

export interface DeploymentRunOptions {
  /** The requirements to check, already selected; all of them by default. */
  requirements?: readonly Requirement[];
  /** What the tester left out (`--skip`), listed in the report as excluded on request. */
  excluded?: readonly Exclusion[];
  /** Longest one requirement may take, all its requests included. */
  timeoutMs?: number;
  onResult?(result: CheckResult): void;
}

/**
 * Checks a running deployment against the requirements, over HTTP only: nothing here imports the
 * services, so the same run certifies any implementation of the two specs.
 */
export async function runDeployment(
  target: DeploymentTarget,
  options: DeploymentRunOptions = {},
): Promise<Report> {
  const redactor = new EvidenceRedactor();
  if (target.operatorKey !== undefined) redactor.remember(target.operatorKey);
  if (target.payerKey !== undefined) redactor.remember(target.payerKey);
  if (target.rpcUrl !== undefined) redactor.remember(target.rpcUrl);
  const payer = target.payerKey === undefined ? undefined : new Payer(target.payerKey, target.rpcUrl);
  const baseUrls = { runtime: target.runtimeUrl, gateway: target.gatewayUrl };
  const features = new FeatureProbe(new HttpClient(baseUrls, redactor, undefined));
  const started = new Date();
  const results = await runChecks<DeploymentContext, Requirement>(options.requirements ?? REQUIREMENTS, {
    redactor,
    timeoutMs: options.timeoutMs ?? 60_000,
    contextFor: (evidence) => ({
      target,
      evidence,
      http: new HttpClient(baseUrls, redactor, evidence),
      secret: (value) => redactor.remember(value),
      ...(payer ? { payer } : {}),
    }),
    precondition: async (requirement) => {
      const absence = await features.absence(requirement.features ?? []);
      return absence === undefined ? undefined : notApplicable(absence);
    },
    ...(options.onResult ? { onResult: options.onResult } : {}),
  });
  return buildReport('deployment', baseUrls, started, results, options.excluded);
}
