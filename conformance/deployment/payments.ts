import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import {
  ensure,
  excerpt,
  expectShape,
  failWith,
  notApplicableBecause,
  OutcomeSignal,
  pass,
  sameAddress,
  x402PaymentRequiredSchema,
  type X402PaymentRequiredWire,
} from '@sigil/plugin-api/kit';
import type { HttpRequest, HttpResponse } from '../http.ts';
import {
  decodeHeader,
  encodeHeader,
  formatUnits,
  HEADER,
  MCP_PAYMENT_META_KEY,
  MCP_PAYMENT_RESPONSE_META_KEY,
  specPriceUnits,
  x402SettleResponseSchema,
} from '../x402.ts';
import { findServableServer, listServerIds, path, type ServableServer } from './catalog.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { expectJson } from './expect.ts';
import {
  CALL_TIMEOUT_MS,
  callToolResultSchema,
  freshSessionId,
  McpConnection,
  PAYER_OPTIONS,
  sampleArguments,
  textOf,
  type McpReply,
  type McpTool,
} from './mcp.ts';
import { requestPaying, requiredOfMcp, requiredOfResponse, type Payer, type Payment } from './payer.ts';
import { findProof } from './proofs.ts';
import { failsOnPurpose } from './secrets.ts';
import { serverAndTool, smokeToolOf } from './tool-calls.ts';

/**
 * Payments (gateway spec parts 1 to 4, 7 and 8): tool calls and POST /api/verify cost an x402
 * payment, asked with 402 and PAYMENT-REQUIRED (x402 v2 HTTP transport) or, over MCP, with the
 * PaymentRequired in the reply (x402 MCP transport); every other endpoint and the meta-tools are
 * free; the price is 0.0005 USD on chain 8453; a payment is settled only after a successful call,
 * once. What needs money (a call that must cost exactly the price, a failing call that must cost
 * nothing, a payment presented twice) needs the tester's payer, `--payer-key` and `--rpc-url`.
 */

const SPEC_COST =
  'gateway spec part 4, REST endpoints: POST /api/servers/:id/tools/:name and POST /api/verify cost "x402", the others are "free"; tools/call: "x402 payment required for non-meta tools"; part 5: "Tool payments use x402"';
const SPEC_PRICE =
  'gateway spec part 2, payment configuration: "network: layer-2 mainnet with chain ID 8453 … price 0.0005 USD per tool call"; part 8: "Price per tool call: 0.0005 USD"';
const SPEC_FLOW =
  'gateway spec part 1: "Verifies a payment proof before execution and settles after success only"; part 3: payment verified → settled, "on-chain settlement after execution"';
const SPEC_NO_CHARGE =
  'gateway spec part 3: "payment verified | execution fails | not settled | no charge"; part 7: "Failed tool calls are not settled (no charge)"';

/** The spec's network and price. */
const SPEC_NETWORK = 'eip155:8453';
const SPEC_CHAIN_ID = 8453;
const SPEC_PRICE_USD = '0.0005';
const CONFIG = '/api/payments/config';
const VERIFY = '/api/verify';
/** How long a settlement may take to show on chain after the paid answer (a gateway may settle later). */
const SETTLEMENT_WAIT_MS = 30_000;
/** How long after a failed call the runner still watches for a late charge. */
const LATE_CHARGE_GRACE_MS = 2_000;

type Json = Record<string, unknown>;

// --- Reading payment requests ------------------------------------------------------------------

/** The x402 v2 PaymentRequired of an unpaid HTTP answer, checked: 402, PAYMENT-REQUIRED, each field. */
function expectPaymentRequired(response: HttpResponse, what: string): X402PaymentRequiredWire {
  if (response.status !== 402) {
    failWith(
      response.status >= 200 && response.status < 300
        ? `${what} without a payment answered HTTP ${response.status}: the deployment charges nothing for it, and the gateway spec makes it an x402 endpoint`
        : `${what} without a payment: expected HTTP 402, got ${response.status}: ${excerpt(response.text.replace(/\s+/g, ' '), 200)}`,
    );
  }
  const header = response.headers.get(HEADER.required);
  ensure(
    header !== null && header !== '',
    `${what} answered 402 without a PAYMENT-REQUIRED header (x402 v2 HTTP transport)`,
  );
  const decoded = decodeHeader(header);
  ensure(decoded !== undefined, `${what}: PAYMENT-REQUIRED is not base64-encoded JSON`);
  const required = expectShape(
    x402PaymentRequiredSchema,
    decoded,
    `${what}: PAYMENT-REQUIRED is not an x402 v2 PaymentRequired`,
  );
  expectEvmAddresses(required, `${what}: PAYMENT-REQUIRED`);
  return required;
}

/** On an EVM network an asset and a payee are 20-byte addresses. */
function expectEvmAddresses(required: X402PaymentRequiredWire, what: string): void {
  for (const entry of required.accepts) {
    if (!entry.network.startsWith('eip155:')) continue;
    for (const field of ['asset', 'payTo'] as const) {
      ensure(
        /^0x[0-9a-fA-F]{40}$/.test(entry[field]),
        `${what}: ${field} "${entry[field]}" on ${entry.network} is not an address`,
      );
    }
  }
}

const restCall = (serverId: string, tool: McpTool, args: Json): HttpRequest => ({
  service: 'gateway',
  method: 'POST',
  path: path.tool(serverId, tool.name),
  json: { arguments: args },
  timeoutMs: CALL_TIMEOUT_MS,
});

const perServer = (serverId: string) => `/mcp/server/${encodeURIComponent(serverId)}`;

/** A payment request inside an MCP reply, or a failure that says what came instead. */
function expectMcpPaymentRequired(reply: McpReply, what: string): X402PaymentRequiredWire {
  ensure(reply.response.status < 500, `${what}: HTTP ${reply.response.status}, a server error`);
  const required = requiredOfMcp(reply);
  if (required) {
    expectEvmAddresses(required, what);
    return required;
  }
  const result = callToolResultSchema.safeParse((reply.message as { result?: unknown } | undefined)?.result);
  if (result.success && result.data.isError !== true) {
    failWith(
      `${what} without a payment ran and answered a result: the gateway spec requires an x402 payment for tools/call of a non-meta tool`,
    );
  }
  failWith(
    `${what} without a payment answered ${excerpt(JSON.stringify(reply.message ?? reply.response.text), 200)}, with no x402 v2 PaymentRequired (a tool result with isError and structuredContent, or a JSON-RPC error's data)`,
  );
}

// --- What the runner needs ----------------------------------------------------------------------

/** The tester's payer, able to read the chain; otherwise the check is not applicable. */
function payerFor(context: DeploymentContext): Payer {
  const { payer } = context;
  if (!payer) notApplicableBecause(`no payer was given: ${PAYER_OPTIONS}`);
  if (!payer.canReadChain)
    notApplicableBecause('no --rpc-url was given: what a payment moved cannot be read on chain');
  return payer;
}

/** Ends the check as not applicable when the deployment asks no payment for a call. */
/** A servable server's smoke tool, its 402 over REST, and the runner's payment for that call. */
async function firstPaymentForSmokeTool(context: DeploymentContext) {
  const payer = payerFor(context);
  const server = await findServableServer(context, { needSmokeTool: true });
  const tool = smokeToolOf(server);
  const id = server.view.id;
  const args = sampleArguments(tool.inputSchema);
  const what = `POST ${path.tool(id, tool.name)}`;
  const required = requireCharged(await context.http.request(restCall(id, tool, args)), what);
  return { payer, id, tool, args, what, payment: await payer.pay(required, context.evidence, what) };
}

function requireCharged(response: HttpResponse, what: string): X402PaymentRequiredWire {
  if (response.status !== 402) {
    notApplicableBecause(
      `${what} without a payment answered HTTP ${response.status}, not 402: the deployment did not ask for a payment (GW-4.x402-payment-required judges that)`,
    );
  }
  const required = requiredOfResponse(response);
  if (!required) {
    notApplicableBecause(
      `${what} answered 402 without an x402 v2 PAYMENT-REQUIRED the runner can pay (GW-4.x402-payment-required judges that)`,
    );
  }
  return required;
}

/** The spec's price in base units of the asset, by the decimals the chain gives it. */
async function specPrice(payer: Payer, asset: string): Promise<{ units: bigint; decimals: number }> {
  const decimals = await payer.decimals(asset);
  if (decimals === undefined) failWith(`the asset ${asset} answers no decimals() on the chain of --rpc-url`);
  const units = specPriceUnits(decimals);
  if (units === undefined)
    failWith(`the asset ${asset} has ${decimals} decimals: 0.0005 USD is no whole number of base units`);
  return { units, decimals };
}

/** Waits until the chain shows the payment's authorization used; false when it never does. */
async function settles(context: DeploymentContext, payer: Payer, payment: Payment): Promise<boolean> {
  const deadline = Date.now() + SETTLEMENT_WAIT_MS;
  for (;;) {
    const used = await payer.authorizationUsed(payment);
    if (used !== false) {
      context.evidence.note(
        `on chain: the authorization is ${used === true ? 'used' : 'of unknown state (no authorizationState)'}`,
      );
      return used ?? true;
    }
    if (Date.now() > deadline) return false;
    await sleep(250);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A paid answer's receipt: PAYMENT-RESPONSE (REST) or `_meta["x402/payment-response"]` (MCP). */
function expectReceipt(receipt: unknown, what: string, where: string): void {
  ensure(
    receipt !== undefined,
    `${what} succeeded without ${where} (x402: a paid response carries the settlement)`,
  );
  const parsed = expectShape(
    x402SettleResponseSchema,
    receipt,
    `${what}: ${where} is not an x402 SettleResponse`,
  );
  ensure(parsed.success, `${what}: ${where} says success false (${parsed.errorReason ?? 'no reason'})`);
}

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

/**
 * A call that fails: a tool that fails on purpose (named with fail, throw or error), else the
 * smoke tool given arguments of the wrong type. Undefined when neither exists.
 */
async function failingCall(
  context: DeploymentContext,
): Promise<{ serverId: string; tool: McpTool; args: Json; how: string } | undefined> {
  try {
    const server = await findServableServer(context, {
      needSmokeTool: false,
      where: {
        wanted: 'serves a tool that fails on purpose (a name with fail, throw or error)',
        unfit: (view) => {
          const tools = Array.isArray(view.details.tools) ? (view.details.tools as unknown[]) : [];
          const names = tools.flatMap((tool) =>
            typeof (tool as { name?: unknown }).name === 'string' ? [(tool as { name: string }).name] : [],
          );
          return names.length > 0 && !names.some(failsOnPurpose)
            ? 'serves no tool that fails on purpose'
            : undefined;
        },
      },
    });
    const tool = server.tools.find((candidate) => failsOnPurpose(candidate.name));
    if (tool)
      return {
        serverId: server.view.id,
        tool,
        args: sampleArguments(tool.inputSchema),
        how: `${tool.name}, which fails on purpose`,
      };
  } catch (err) {
    if (!(err instanceof OutcomeSignal) || err.outcome.status !== 'not-applicable') throw err;
    context.evidence.note(
      `no tool fails on purpose (${err.outcome.reason}); giving a tool arguments of the wrong type`,
    );
  }
  const { server, tool } = await serverAndTool(context);
  const args = wrongArguments(tool);
  if (!args) return undefined;
  return { serverId: server.view.id, tool, args, how: `${tool.name} with arguments of the wrong type` };
}

/** The least arguments a tool accepts, its first required argument given a value of another type. */
function wrongArguments(tool: McpTool): Json | undefined {
  const required = Array.isArray(tool.inputSchema.required) ? (tool.inputSchema.required as string[]) : [];
  const key = required[0];
  if (key === undefined) return undefined;
  const properties = (tool.inputSchema.properties ?? {}) as Record<string, { type?: unknown }>;
  const wrong: Record<string, unknown> = {
    string: 12345,
    number: 'not a number',
    integer: 'not a number',
    boolean: 'not a boolean',
    array: 'not an array',
    object: 'not an object',
  };
  const type = properties[key]?.type;
  if (typeof type !== 'string' || !(type in wrong)) return undefined;
  return { ...sampleArguments(tool.inputSchema), [key]: wrong[type] };
}

/** True for an answer that is a failure: a tool error, a JSON-RPC error, a 4xx or 5xx (but 402). */
function failed(response: HttpResponse, message: unknown): boolean {
  if (message !== undefined) {
    const reply = message as { error?: unknown; result?: { isError?: unknown } };
    return reply.error !== undefined || reply.result?.isError === true;
  }
  if (response.status >= 400) return true;
  return (response.body as { isError?: unknown } | undefined)?.isError === true;
}

// --- The configuration -----------------------------------------------------------------------------

interface ReadConfig {
  body: Json;
  network: string | undefined;
  chainId: number | undefined;
  units: bigint | undefined;
  decimals: number | undefined;
  usd: string | undefined;
  asset: string | undefined;
  payTo: string | undefined;
}

const objectAt = (value: unknown): Json | undefined =>
  typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Json) : undefined;

/** GET /api/payments/config, read leniently: the spec names the endpoint, not its body. */
async function readConfig(context: DeploymentContext): Promise<ReadConfig> {
  const body = expectJson(
    await context.http.request({ service: 'gateway', path: CONFIG }),
    200,
    z.record(z.string(), z.unknown()),
    `GET ${CONFIG}`,
  );
  const token = objectAt(body.token) ?? objectAt(body.asset) ?? {};
  const price = objectAt(body.price);
  const unitsValue = body.pricePerCall ?? price?.amount ?? body.amount;
  const decimals = token.decimals ?? body.decimals;
  const usd = body.priceUsd ?? body.priceUSD ?? (typeof body.price === 'string' ? body.price : undefined);
  const asset = token.address ?? (typeof body.asset === 'string' ? body.asset : undefined);
  return {
    body,
    network: typeof body.network === 'string' ? body.network : undefined,
    chainId: typeof body.chainId === 'number' ? body.chainId : undefined,
    units:
      (typeof unitsValue === 'string' && /^\d+$/.test(unitsValue)) ||
      (typeof unitsValue === 'number' && Number.isInteger(unitsValue))
        ? BigInt(unitsValue)
        : undefined,
    decimals: typeof decimals === 'number' && Number.isInteger(decimals) ? decimals : undefined,
    usd: typeof usd === 'string' || typeof usd === 'number' ? String(usd) : undefined,
    asset: typeof asset === 'string' ? asset : undefined,
    payTo: typeof body.payTo === 'string' ? body.payTo : undefined,
  };
}

/** "0.00050" and "0.0005" are the same price. */
const sameDecimal = (a: string, b: string): boolean => {
  const norm = (text: string) =>
    text
      .trim()
      .replace(/^\$/, '')
      .replace(/(\.\d*?)0+$/, '$1')
      .replace(/\.$/, '');
  return norm(a) === norm(b);
};

// --- The requirements ------------------------------------------------------------------------------

export const paymentRequirements: readonly Requirement[] = [
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
      const required = expectMcpPaymentRequired(reply, what);
      context.evidence.note('the PaymentRequired of the reply', required);
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
  {
    id: 'GW-4.x402-free-endpoints',
    level: 'MUST',
    title:
      'Free endpoints never ask for a payment: GET /health, /api/servers, /api/servers/:id, /api/servers/:id/tools, /api/payments/config, /api/auth/challenge, and MCP initialize, tools/list and every meta-tool',
    spec: `${SPEC_COST}; part 4: GET /health, /api/servers…, /api/auth/challenge, /api/payments/config are "free"`,
    service: 'gateway',
    check: async (context) => {
      const asked: string[] = [];
      const ids = await listServerIds(context);
      const id = ids[0];
      const paths = [
        '/health',
        path.servers,
        ...(id === undefined ? [] : [path.server(id), path.tools(id)]),
        CONFIG,
        `/api/auth/challenge?address=0x000000000000000000000000000000000000dEaD`,
      ];
      for (const where of paths) {
        const response = await context.http.request({
          service: 'gateway',
          path: where,
          timeoutMs: CALL_TIMEOUT_MS,
        });
        if (response.status === 402 || response.headers.get(HEADER.required) !== null)
          asked.push(`GET ${where.split('?')[0]} (HTTP ${response.status})`);
      }
      const mcpAsks = (reply: McpReply): boolean =>
        reply.response.status === 402 ||
        requiredOfMcp(reply) !== undefined ||
        (failed(reply.response, reply.message) &&
          /payment[ _-]?required|x402/i.test(JSON.stringify(reply.message ?? '')));
      const connection = await McpConnection.open(context, '/mcp', { 'x-mcp-session': freshSessionId() });
      const listed = await connection.send('tools/list', {});
      if (mcpAsks(listed)) asked.push('tools/list at POST /mcp');
      const tools = z
        .object({
          result: z.object({
            tools: z.array(
              z
                .object({ name: z.string(), inputSchema: z.record(z.string(), z.unknown()).optional() })
                .loose(),
            ),
          }),
        })
        .safeParse(listed.message);
      ensure(tools.success, `tools/list at POST /mcp did not answer a list of tools`);
      // A fresh session lists meta-tools only (GW-1.discovery-opt-in): each is called, with the server's id where it takes one.
      for (const meta of tools.data.result.tools) {
        const schema = meta.inputSchema ?? { type: 'object' };
        const properties = Object.keys((schema.properties ?? {}) as Json);
        const serverArgument = ['serverId', 'server_id', 'server', 'id'].find((name) =>
          properties.includes(name),
        );
        const args = {
          ...sampleArguments(schema),
          ...(serverArgument && id !== undefined ? { [serverArgument]: id } : {}),
        };
        const reply = await connection.send(
          'tools/call',
          { name: meta.name, arguments: args },
          CALL_TIMEOUT_MS,
        );
        if (mcpAsks(reply)) asked.push(`the meta-tool ${meta.name} (tools/call at POST /mcp)`);
      }
      context.evidence.note(
        `called ${tools.data.result.tools.length} meta-tool(s): ${tools.data.result.tools.map((t) => t.name).join(', ')}`,
      );
      if (id !== undefined) {
        const single = await McpConnection.open(context, perServer(id));
        if (mcpAsks(await single.send('tools/list', {}))) asked.push(`tools/list at POST ${perServer(id)}`);
      }
      ensure(asked.length === 0, `free endpoints asked for a payment: ${asked.join('; ')}`);
      return pass();
    },
  },
  {
    id: 'GW-8.x402-price',
    level: 'MUST',
    title:
      'GET /api/payments/config states 0.0005 USD per call (500 base units at 6 decimals) on eip155:8453, and PAYMENT-REQUIRED asks exactly that',
    spec: SPEC_PRICE,
    service: 'gateway',
    check: async (context) => {
      const config = await readConfig(context);
      context.evidence.note(`GET ${CONFIG}`, config.body);
      ensure(
        config.body.enabled !== false,
        `GET ${CONFIG} says payments are off: the gateway spec charges ${SPEC_PRICE_USD} USD per tool call`,
      );
      ensure(
        config.network !== undefined || config.chainId !== undefined,
        `GET ${CONFIG} names no network nor chainId`,
      );
      ensure(
        config.network === undefined || config.network === SPEC_NETWORK,
        `GET ${CONFIG} says network ${config.network}, not ${SPEC_NETWORK}`,
      );
      ensure(
        config.chainId === undefined || config.chainId === SPEC_CHAIN_ID,
        `GET ${CONFIG} says chainId ${config.chainId}, not ${SPEC_CHAIN_ID}`,
      );
      ensure(
        config.units !== undefined && config.decimals !== undefined,
        `GET ${CONFIG} states no price in base units (pricePerCall) with the token's decimals (token.decimals)`,
      );
      const expected = specPriceUnits(config.decimals);
      const stated = formatUnits(config.units, config.decimals);
      ensure(
        expected !== undefined && config.units === expected,
        `GET ${CONFIG} states ${config.units} base units at ${config.decimals} decimals = ${stated} USD; the spec's price is ${SPEC_PRICE_USD} USD${expected === undefined ? '' : ` (${expected} base units)`}`,
      );
      ensure(
        config.usd === undefined || sameDecimal(config.usd, SPEC_PRICE_USD),
        `GET ${CONFIG} states the price as ${config.usd} USD, not ${SPEC_PRICE_USD}`,
      );
      if (config.asset !== undefined && context.payer?.canReadChain) {
        const onChain = await context.payer.decimals(config.asset);
        ensure(
          onChain === undefined || onChain === config.decimals,
          `GET ${CONFIG} says the token has ${config.decimals} decimals; the chain of --rpc-url says ${onChain}`,
        );
      }
      const { server, tool } = await serverAndTool(context);
      const what = `POST ${path.tool(server.view.id, tool.name)}`;
      const required = expectPaymentRequired(
        await context.http.request(restCall(server.view.id, tool, sampleArguments(tool.inputSchema))),
        what,
      );
      const entry = required.accepts.find((candidate) => candidate.network === SPEC_NETWORK);
      ensure(
        entry,
        `${what}: PAYMENT-REQUIRED accepts nothing on ${SPEC_NETWORK} (${required.accepts.map((e) => e.network).join(', ')})`,
      );
      const wrong = [
        entry.amount === config.units.toString() ? '' : `amount ${entry.amount} (config: ${config.units})`,
        config.asset === undefined || sameAddress(entry.asset, config.asset)
          ? ''
          : `asset ${entry.asset} (config: ${config.asset})`,
        config.payTo === undefined || sameAddress(entry.payTo, config.payTo)
          ? ''
          : `payTo ${entry.payTo} (config: ${config.payTo})`,
      ].filter((problem) => problem !== '');
      ensure(
        wrong.length === 0,
        `${what}: PAYMENT-REQUIRED disagrees with GET ${CONFIG}: ${wrong.join(', ')}`,
      );
      return pass();
    },
  },
  {
    id: 'GW-3.x402-charge-exact',
    level: 'MUST',
    title:
      'A paid successful tool call costs the payer exactly the price, over REST and MCP, and says so in its receipt',
    spec: `${SPEC_FLOW}; ${SPEC_PRICE}; x402 v2: PAYMENT-RESPONSE (HTTP), _meta["x402/payment-response"] (MCP)`,
    service: 'gateway',
    check: async (context) => {
      // REST: 402, paid, 200 with PAYMENT-RESPONSE; the payer's balance drops by the price.
      const { payer, id, tool, args, what, payment } = await firstPaymentForSmokeTool(context);
      const price = await specPrice(payer, payment.accepted.asset);
      const before = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
      const paid = await context.http.request({
        ...restCall(id, tool, args),
        headers: { [HEADER.signature]: encodeHeader(payment.payload) },
      });
      ensure(
        paid.status !== 402,
        `${what}, paid, was refused with 402: ${excerpt(JSON.stringify(requiredOfResponse(paid)?.error ?? paid.text), 200)}`,
      );
      const result = expectJson(paid, 200, callToolResultSchema.loose(), `${what}, paid`);
      ensure(
        result.isError !== true,
        `${what}, paid, answered a tool error: ${excerpt(textOf(result), 200)}`,
      );
      expectReceipt(decodeHeader(paid.headers.get(HEADER.response)), `${what}, paid`, 'PAYMENT-RESPONSE');
      ensure(
        await settles(context, payer, payment),
        `${what}, paid, answered 200 but its payment was not settled on chain within ${SETTLEMENT_WAIT_MS / 1000} s`,
      );
      const afterRest = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
      const costs = (spent: bigint) => `${spent} base units (${formatUnits(spent, price.decimals)} USD)`;
      ensure(
        before - afterRest === price.units,
        `${what}, paid, cost the payer ${costs(before - afterRest)}; the price is ${costs(price.units)}`,
      );
      // MCP: the payment in params._meta, the receipt in result._meta.
      const connection = await McpConnection.open(context, perServer(id));
      const where = `tools/call ${tool.name} at POST ${connection.path}`;
      const unpaid = await connection.send(
        'tools/call',
        { name: tool.name, arguments: args },
        CALL_TIMEOUT_MS,
      );
      const mcpPayment = await payer.pay(expectMcpPaymentRequired(unpaid, where), context.evidence, where);
      const reply = await connection.send(
        'tools/call',
        { name: tool.name, arguments: args, _meta: { [MCP_PAYMENT_META_KEY]: mcpPayment.payload } },
        CALL_TIMEOUT_MS,
      );
      ensure(
        requiredOfMcp(reply) === undefined,
        `${where}, paid, still asks for a payment: ${excerpt(JSON.stringify(reply.message), 200)}`,
      );
      const mcpResult = expectShape(
        callToolResultSchema.extend({ _meta: z.record(z.string(), z.unknown()).optional() }).loose(),
        (reply.message as { result?: unknown } | undefined)?.result,
        `${where}, paid: the reply is not a tool result`,
      );
      ensure(
        mcpResult.isError !== true,
        `${where}, paid, answered a tool error: ${excerpt(textOf(mcpResult), 200)}`,
      );
      expectReceipt(
        mcpResult._meta?.[MCP_PAYMENT_RESPONSE_META_KEY],
        `${where}, paid`,
        `_meta["${MCP_PAYMENT_RESPONSE_META_KEY}"]`,
      );
      ensure(
        await settles(context, payer, mcpPayment),
        `${where}, paid, answered but its payment was not settled on chain within ${SETTLEMENT_WAIT_MS / 1000} s`,
      );
      const afterMcp = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
      ensure(
        afterRest - afterMcp === price.units,
        `${where}, paid, cost the payer ${costs(afterRest - afterMcp)}; the price is ${costs(price.units)}`,
      );
      return pass();
    },
  },
  {
    id: 'GW-7.x402-no-charge-on-failure',
    level: 'MUST',
    title:
      'A paid tool call that fails costs nothing: the payer’s balance is unchanged and the authorization unused, over REST and MCP',
    spec: SPEC_NO_CHARGE,
    service: 'gateway',
    check: async (context) => {
      const payer = payerFor(context);
      const call = await failingCall(context);
      if (!call)
        notApplicableBecause(
          'no tool can be made to fail: none fails on purpose, and none takes an argument that can be given the wrong type',
        );
      context.evidence.note(`the failing call: ${call.how} of ${call.serverId}`);
      const charged: string[] = [];
      let exercised = 0;
      const watch = async (what: string, payment: Payment, before: bigint) => {
        exercised += 1;
        await sleep(LATE_CHARGE_GRACE_MS);
        const after = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
        const used = await payer.authorizationUsed(payment, context.evidence);
        if (after !== before) charged.push(`${what} cost the payer ${before - after} base units`);
        else if (used === true) charged.push(`${what} used the payment's authorization on chain`);
      };
      // REST
      const what = `POST ${path.tool(call.serverId, call.tool.name)} (${call.how})`;
      const unpaid = await context.http.request(restCall(call.serverId, call.tool, call.args));
      const required = requiredOfResponse(unpaid);
      if (unpaid.status === 402 && required) {
        const payment = await payer.pay(required, context.evidence, what);
        const before = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
        const paid = await context.http.request({
          ...restCall(call.serverId, call.tool, call.args),
          headers: { [HEADER.signature]: encodeHeader(payment.payload) },
        });
        ensure(
          paid.status !== 402,
          `${what}, paid, was refused with 402 instead of running: ${excerpt(paid.text, 200)}`,
        );
        if (failed(paid, undefined)) await watch(what, payment, before);
        else context.evidence.note(`${what} succeeded: no failure to observe over REST`);
      } else {
        context.evidence.note(
          `${what} without a payment answered HTTP ${unpaid.status}: no paid failure over REST`,
        );
      }
      // MCP
      const connection = await McpConnection.open(context, perServer(call.serverId));
      const where = `tools/call ${call.tool.name} at POST ${connection.path} (${call.how})`;
      const unpaidMcp = await connection.send(
        'tools/call',
        { name: call.tool.name, arguments: call.args },
        CALL_TIMEOUT_MS,
      );
      const requiredMcp = requiredOfMcp(unpaidMcp);
      if (requiredMcp) {
        const payment = await payer.pay(requiredMcp, context.evidence, where);
        const before = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
        const reply = await connection.send(
          'tools/call',
          { name: call.tool.name, arguments: call.args, _meta: { [MCP_PAYMENT_META_KEY]: payment.payload } },
          CALL_TIMEOUT_MS,
        );
        ensure(
          requiredOfMcp(reply) === undefined,
          `${where}, paid, was refused with a payment request instead of running`,
        );
        if (failed(reply.response, reply.message)) await watch(where, payment, before);
        else context.evidence.note(`${where} succeeded: no failure to observe over MCP`);
      } else {
        context.evidence.note(`${where} without a payment asked for none: no paid failure over MCP`);
      }
      if (exercised === 0)
        notApplicableBecause(
          `no paid call failed: ${call.how} either succeeded or was refused before a payment was asked`,
        );
      ensure(charged.length === 0, `failed calls were charged: ${charged.join('; ')}`);
      return pass();
    },
  },
  {
    id: 'GW-3.x402-replay-refused',
    level: 'MUST',
    title:
      'A payment presented again (at once, after it settled, and over MCP) is refused with a payment request and charged once only',
    spec: `${SPEC_FLOW}: a verified payment is settled once`,
    service: 'gateway',
    check: async (context) => {
      const { payer, id, tool, args, what, payment } = await firstPaymentForSmokeTool(context);
      const before = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
      const paidRequest = {
        ...restCall(id, tool, args),
        headers: { [HEADER.signature]: encodeHeader(payment.payload) },
      };
      // The same payment three times at once: one call runs, the others are refused.
      const concurrent = await Promise.all([1, 2, 3].map(() => context.http.request(paidRequest)));
      const statuses = concurrent.map((response) => response.status);
      context.evidence.note(`the same payment sent 3 times at once: HTTP ${statuses.join(', ')}`);
      const ran = statuses.filter((status) => status === 200).length;
      ensure(
        ran === 1,
        `the same payment sent 3 times at once ran ${ran} call(s) (HTTP ${statuses.join(', ')}); exactly one must run`,
      );
      ensure(
        statuses.every((status) => status === 200 || status === 402),
        `the copies of a payment already in use were not answered 402 (HTTP ${statuses.join(', ')})`,
      );
      ensure(
        await settles(context, payer, payment),
        `${what}, paid, ran but its payment was not settled on chain within ${SETTLEMENT_WAIT_MS / 1000} s`,
      );
      // Again, once it settled.
      const again = await context.http.request(paidRequest);
      ensure(
        again.status === 402,
        `${what} with a payment already settled answered HTTP ${again.status}, not 402`,
      );
      // Over MCP: the same payment in params._meta.
      const connection = await McpConnection.open(context, perServer(id));
      const where = `tools/call ${tool.name} at POST ${connection.path}`;
      const replay = await connection.send(
        'tools/call',
        { name: tool.name, arguments: args, _meta: { [MCP_PAYMENT_META_KEY]: payment.payload } },
        CALL_TIMEOUT_MS,
      );
      expectMcpPaymentRequired(replay, `${where} with a payment already settled over REST`);
      await sleep(LATE_CHARGE_GRACE_MS);
      const after = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
      ensure(
        before - after === BigInt(payment.accepted.amount),
        `one payment presented 5 times cost the payer ${before - after} base units; it was for ${payment.accepted.amount}, once`,
      );
      return pass();
    },
  },
];
