import { randomUUID } from 'node:crypto';
import { notApplicableBecause, OutcomeSignal, pass } from '@sigil/plugin-api/kit';
import { findServableServer, path, type ServableServer } from '../catalog.ts';
import type { DeploymentContext, Requirement } from '../context.ts';
import {
  CALL_TIMEOUT_MS,
  McpConnection,
  MODERN_PROTOCOL_VERSION,
  PAYER_OPTIONS,
  sampleArguments,
} from '../mcp.ts';
import { requestPaying } from '../payer.ts';
import { findProof } from '../proofs.ts';
import { serverAndTool, smokeToolOf } from '../tool-calls.ts';
import {
  expectMcpPaymentRequired,
  expectPaymentRequired,
  expectSamePaymentRequired,
  legacyPaymentRequired,
  perServer,
  restCall,
  type Json,
} from './messages.ts';
import { SPEC_COST, VERIFY } from './spec.ts';

/** The paid endpoints ask for a payment: a tool call over REST and MCP, and POST /api/verify. */

export const paymentRequiredRequirements: readonly Requirement[] = [
  {
    id: 'GW-4.x402-payment-required',
    level: 'MUST',
    title:
      'An unpaid POST /api/servers/:id/tools/:name is answered 402 with PAYMENT-REQUIRED, an x402 v2 PaymentRequired naming scheme, network, amount, asset and payTo',
    spec: `${SPEC_COST}; x402 v2 HTTP transport: 402 and the PAYMENT-REQUIRED header (base64 JSON)`,
    service: 'gateway',
    check: async (context) => {
      const { server, tool } = await serverAndTool(context);
      const what = `POST ${path.tool(server.view.id, tool.name)}`;
      const response = await context.http.request(
        restCall(server.view.id, tool, sampleArguments(tool.inputSchema)),
      );
      const required = expectPaymentRequired(response, what);
      context.evidence.note('PAYMENT-REQUIRED, decoded', required);
      return pass();
    },
  },
  {
    id: 'GW-4.x402-mcp-payment-required',
    level: 'MUST',
    title:
      'An unpaid tools/call of a server tool is answered with an x402 v2 PaymentRequired, and does not run',
    spec: `${SPEC_COST}; x402 v2 MCP transport: PaymentRequired in an isError result's structuredContent (or a JSON-RPC error's data)`,
    service: 'gateway',
    check: async (context) => {
      const { server, tool } = await serverAndTool(context);
      const connection = await McpConnection.open(context, perServer(server.view.id));
      const what = `tools/call ${tool.name} at POST ${connection.path}`;
      const reply = await connection.send(
        'tools/call',
        { name: tool.name, arguments: sampleArguments(tool.inputSchema) },
        CALL_TIMEOUT_MS,
      );
      const { required, place } = expectMcpPaymentRequired(reply, what);
      context.evidence.note(`the PaymentRequired of the reply, in ${place}`, required);
      return pass();
    },
  },
  {
    id: 'GW-4.x402-mcp-2026-payment-required',
    level: 'MUST',
    title: `An unpaid tools/call of a server tool at MCP ${MODERN_PROTOCOL_VERSION} is answered as at 2025-11-25: an x402 v2 PaymentRequired in the same place, asking the same terms, and does not run`,
    spec: `${SPEC_COST}; x402 v2 MCP transport; MCP ${MODERN_PROTOCOL_VERSION} (the gateway serves the same payments on both revisions)`,
    service: 'gateway',
    features: ['mcp-2026'],
    check: async (context) => {
      const { server, tool } = await serverAndTool(context);
      const endpoint = perServer(server.view.id);
      const args = sampleArguments(tool.inputSchema);
      const baseline = await legacyPaymentRequired(context, endpoint, tool, args);
      const connection = McpConnection.modern(context, endpoint);
      const what = `${connection.what('tools/call')} ${tool.name} at POST ${endpoint}`;
      const reply = await connection.send(
        'tools/call',
        { name: tool.name, arguments: args },
        CALL_TIMEOUT_MS,
      );
      const modern = expectMcpPaymentRequired(reply, what);
      expectSamePaymentRequired(baseline, modern, what);
      context.evidence.note(`the PaymentRequired at both revisions, in ${modern.place}`, modern.required);
      return pass();
    },
  },
  {
    id: 'GW-4.x402-verify-payment-required',
    level: 'MUST',
    title: 'An unpaid POST /api/verify is answered 402 with an x402 v2 PAYMENT-REQUIRED',
    spec: `${SPEC_COST}`,
    service: 'gateway',
    check: async (context) => {
      // A real proof where the runner can get one (a free call, or a paid one); else one made up.
      const real = await realProof(context);
      context.evidence.note(
        real ? 'a real proof, from a tool call' : 'a made-up proof (no tool call the runner could pay)',
      );
      const response = await context.http.request({
        service: 'gateway',
        method: 'POST',
        path: VERIFY,
        json: { proof: real ?? madeUpProof() },
      });
      if (!real && response.status >= 400 && response.status < 500 && response.status !== 402) {
        notApplicableBecause(
          `POST ${VERIFY} refused the runner's made-up proof with HTTP ${response.status} before asking for a payment; a real proof needs a paid tool call: ${PAYER_OPTIONS}`,
        );
      }
      const required = expectPaymentRequired(response, `POST ${VERIFY}`);
      context.evidence.note('PAYMENT-REQUIRED, decoded', required);
      return pass();
    },
  },
];

/** A made-up proof as Sigil writes them, for a deployment whose tool calls the runner cannot pay. */
function madeUpProof(): Json {
  const hex = (bytes: number) => '0'.repeat(bytes * 2);
  return {
    version: 'sigil-proof/1',
    id: randomUUID(),
    gateway: { codeHash: hex(32), gitCommit: hex(20) },
    server: {
      id: 'conformance',
      package: 'conformance',
      version: '0.0.0',
      registry: 'npm',
      digest: 'sha512-AA==',
    },
    tool: 'conformance',
    canonicalization: 'RFC8785',
    requestHash: hex(32),
    responseHash: hex(32),
    timestamp: new Date().toISOString(),
    tee: { enabled: false, platform: 'none' },
    keySource: 'ephemeral',
    secretNames: [],
    fieldMacs: {},
    signature: hex(32),
  };
}

/** A real proof from a tool call (paid when the runner can pay), or undefined. */
async function realProof(context: DeploymentContext): Promise<Json | undefined> {
  let server: ServableServer;
  try {
    server = await findServableServer(context, { needSmokeTool: true });
  } catch (err) {
    if (err instanceof OutcomeSignal && err.outcome.status === 'not-applicable') return undefined;
    throw err;
  }
  const tool = smokeToolOf(server);
  const { response } = await requestPaying(
    context,
    restCall(server.view.id, tool, sampleArguments(tool.inputSchema)),
    `POST ${path.tool(server.view.id, tool.name)}`,
  );
  if (response.status !== 200 || typeof response.body !== 'object' || response.body === null)
    return undefined;
  try {
    return findProof(response.body as Json, `POST ${path.tool(server.view.id, tool.name)}`);
  } catch (err) {
    if (err instanceof OutcomeSignal) return undefined;
    throw err;
  }
}
