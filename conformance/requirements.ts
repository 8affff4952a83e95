import type { Requirement } from './deployment/context.ts';
import { attestationRequirements } from './deployment/attestation/index.ts';
import { canvasRequirements } from './deployment/canvas/index.ts';
import { chatRequirements } from './deployment/chat.ts';
import { delegationRequirements } from './deployment/delegation.ts';
import { discoveryRequirements } from './deployment/discovery.ts';
import { edgeRequirements } from './deployment/edge.ts';
import { gatewayAuthRequirements } from './deployment/gateway-auth.ts';
import { healthRequirements } from './deployment/health.ts';
import { ledgerRequirements } from './deployment/ledger.ts';
import { mcp2026Requirements } from './deployment/mcp-2026.ts';
import { mcpProtocolRequirements } from './deployment/mcp-protocol.ts';
import { paymentRequirements } from './deployment/payments/index.ts';
import { proofRequirements } from './deployment/proofs.ts';
import { registryRequirements } from './deployment/registries.ts';
import { secretsRequirements } from './deployment/secrets.ts';
import { selfImprovementRequirements } from './deployment/self-improvement.ts';
import { serversApiRequirements } from './deployment/servers-api.ts';
import { foreignTokenRequirement, signInRequirements } from './deployment/sign-in.ts';
import { toolCallRequirements } from './deployment/tool-calls.ts';
import { GATEWAY_AUTH, RUNTIME_AUTH } from './deployment/wallet.ts';

export type { DeploymentContext, DeploymentTarget, Requirement } from './deployment/context.ts';

/**
 * Every requirement the deployment runner checks, in the order it runs them. Each area of a spec has
 * its own file under `deployment/`; add a requirement there and list its array here.
 *
 * Ids: `GW-<part>.<slug>` for the gateway spec, `RT-<part>.<slug>` for the runtime spec, where <part>
 * is the numbered part of the spec the requirement comes from (4 endpoints, 5 authentication, …).
 * Once published an id never changes meaning: testers pin them in `--only` and `--skip`.
 */
export const REQUIREMENTS: readonly Requirement[] = [
  ...healthRequirements,
  ...signInRequirements(GATEWAY_AUTH),
  ...gatewayAuthRequirements,
  foreignTokenRequirement(GATEWAY_AUTH, RUNTIME_AUTH),
  ...mcpProtocolRequirements,
  ...mcp2026Requirements,
  ...edgeRequirements,
  ...serversApiRequirements,
  ...discoveryRequirements,
  ...toolCallRequirements,
  ...paymentRequirements,
  ...proofRequirements,
  ...registryRequirements,
  ...secretsRequirements,
  ...signInRequirements(RUNTIME_AUTH),
  foreignTokenRequirement(RUNTIME_AUTH, GATEWAY_AUTH),
  ...delegationRequirements,
  ...attestationRequirements,
  ...ledgerRequirements,
  ...chatRequirements,
  ...canvasRequirements,
  ...selfImprovementRequirements,
];
