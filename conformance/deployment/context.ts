import type { Hex } from 'viem';
import type { Check, EvidenceLog } from '@sigil/plugin-api/kit';
import type { HttpClient, ServiceName } from '../http.ts';
import type { FeatureName } from './features.ts';
import type { Payer } from './payer.ts';

/** What the tester tells the runner beyond the two URLs. */
export interface DeploymentTarget {
  runtimeUrl: string;
  gatewayUrl: string;
  /**
   * A private key of one of the gateway's operator wallets. A black box cannot know who the operators
   * are, so the operator checks need one; without it they are not applicable. Never printed.
   */
  operatorKey?: Hex;
  /** The tester states that the gateway runs with ERC8128_ENFORCE_OPERATOR_MCP=true. */
  expectOperatorEnforcement?: boolean;
  /**
   * A private key of a wallet funded in the deployment's payment token, which the runner spends to pay
   * for tool calls (at most 0.01 USD a call). Without it, paid calls are not applicable. Never printed.
   */
  payerKey?: Hex;
  /** JSON-RPC URL of the payment chain, to read what payments moved. Treated as a secret (it may hold an API key). */
  rpcUrl?: string;
}

/** What a deployment check runs with. */
export interface DeploymentContext {
  target: DeploymentTarget;
  http: HttpClient;
  evidence: EvidenceLog;
  /** Marks a value as secret for the rest of the run (a private key, a token), so no report shows it. */
  secret(value: string): void;
  /** The tester's payer, when `payerKey` was given: tool calls that ask for a payment are paid. */
  payer?: Payer;
}

/** Named sets of requirements a tester selects or leaves out as a whole (`--skip tee`), with what each holds. */
export const REQUIREMENT_GROUPS = {
  tee: 'the requirements that need a TEE: they fail on a deployment without one, such as npm start with tee-none',
  canvas:
    "canvas workflows (Sigil's /canvas routes): topological order, cycle refusal, approval enforcement, SSE events, owner-only runs",
  'self-improvement':
    'self-improvement: the status, trigger, history and settings routes, the four schedule values, owner-only runs, a trigger making a history entry',
} as const;

export type RequirementGroup = keyof typeof REQUIREMENT_GROUPS;

/** One requirement of a spec, checked over HTTP only. */
export interface Requirement extends Check<DeploymentContext> {
  /** `GW-<part>.<slug>` for the gateway spec, `RT-<part>.<slug>` for the runtime spec. */
  id: `GW-${number}.${string}` | `RT-${number}.${string}`;
  /** The service the requirement is about (a check may call the other one too). */
  service: ServiceName;
  /**
   * What the deployment must expose beyond what the spec mandates for the check to apply. When a
   * feature is absent the requirement is reported not applicable, with the probe's finding as reason.
   */
  features?: readonly FeatureName[];
  /** The groups it belongs to, by which `--only` and `--skip` select it too. */
  groups?: readonly RequirementGroup[];
}
