import type { IncomingMessage, ServerResponse } from 'node:http';
import { expect } from 'chai';
import type { CheckResult } from '@sigil/plugin-api/kit';
import type { DeploymentTarget } from '../../conformance/deployment/context.ts';
import { runDeployment } from '../../conformance/deployment/run.ts';
import { REQUIREMENTS } from '../../conformance/requirements.ts';
import { decodeHeader, encodeHeader } from '../../conformance/x402.ts';
import type { PaymentRailV1, VerifiedPayment } from '@sigil/plugin-api';
import { X402EvmRail } from '../../plugins/payments/x402-evm/index.ts';
import { configSchema } from '../../plugins/payments/x402-evm/config.ts';
import { railPlugin } from '../services/gateway/payments/support.ts';
import { startDevChain, type DevChain } from '../support/chain.ts';
import { claimsModern, complete, DISCOVERED, sendJson, startTinyServer, type TinyServer } from './support.ts';
import { systemClock } from '../../core/clock.ts';

/**
 * The payment requirements against a small gateway that is not Sigil, charging real money on anvil
 * through the payments-x402-evm rail, and answering MCP with x402's tool-result form (Sigil uses a
 * JSON-RPC error). Conforming, it passes; each fault fails the requirement that is about it.
 */

interface Faults {
  /** Nothing is ever charged. */
  free?: boolean;
  /** POST /api/verify is free. */
  freeVerify?: boolean;
  /** A failing tool call is settled all the same. */
  chargeOnFailure?: boolean;
  /** No reservation: a payment seen before runs again, and copies in flight all run. */
  acceptReplay?: boolean;
  /** The rail asks 600 base units while the config states 500. */
  asks600?: boolean;
  /** The meta-tools ask for a payment too. */
  chargedMetaTools?: boolean;
  /** No 2026-07-28: `_meta` is ignored and server/discover is unknown, as on a 2025-only gateway. */
  no2026?: boolean;
  /** At 2026-07-28, an unpaid call's PaymentRequired is a JSON-RPC error's data (at 2025-11-25 a tool result's). */
  modernAsksInError?: boolean;
  /** At 2026-07-28, an unpaid call asks 600 base units (at 2025-11-25 the price, 500). */
  modernAsks600?: boolean;
  /** At 2026-07-28, a paid result carries no receipt. */
  modernDropsReceipt?: boolean;
}

/** Those about MCP 2026-07-28, which this gateway speaks beside 2025-11-25. */
const MODERN_IDS = ['GW-4.x402-mcp-2026-payment-required', 'GW-3.x402-mcp-2026-charge-exact'];
const PAYMENT_IDS = [
  'GW-4.x402-payment-required',
  'GW-4.x402-mcp-payment-required',
  ...MODERN_IDS,
  'GW-4.x402-verify-payment-required',
  'GW-4.x402-free-endpoints',
  'GW-8.x402-price',
  'GW-3.x402-charge-exact',
  'GW-7.x402-no-charge-on-failure',
  'GW-3.x402-replay-refused',
];
/** Those that spend the tester's money, and read the chain. */
const PAYER_IDS = [
  'GW-3.x402-charge-exact',
  'GW-3.x402-mcp-2026-charge-exact',
  'GW-7.x402-no-charge-on-failure',
  'GW-3.x402-replay-refused',
];

const SHOUT = {
  name: 'shout',
  description: 'Says the text back',
  inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
};
const FAIL = { name: 'fail', description: 'Always fails', inputSchema: { type: 'object', properties: {} } };
const META = [
  {
    name: 'turn_on',
    description: 'Enable a server for this session',
    inputSchema: { type: 'object', properties: { server: { type: 'string' } }, required: ['server'] },
  },
  {
    name: 'turn_off',
    description: 'Disable a server for this session',
    inputSchema: { type: 'object', properties: { server: { type: 'string' } }, required: ['server'] },
  },
];

type ToolResult = {
  content: { type: string; text: string }[];
  isError?: boolean;
  _meta?: Record<string, unknown>;
};

function runTool(name: string, args: Record<string, unknown>): ToolResult {
  if (name === 'fail') return { isError: true, content: [{ type: 'text', text: 'failed on purpose' }] };
  return {
    content: [{ type: 'text', text: String(args.text) }],
    _meta: { 'io.sigil/execution-proof': { tool: name, signature: 'not-a-real-one' } },
  };
}

/** One gateway with one server, `echoes` (smoke tool `shout`, and `fail`), paid through `rail`. */
function fakeGateway(rail: PaymentRailV1, faults: Faults) {
  const terms = rail.terms();
  const reserved = new Set<string>();
  const settledPayloads = new Map<string, VerifiedPayment>();

  type Paid = { required: unknown } | { value: ToolResult | Record<string, unknown>; receipt?: unknown };

  /** The gateway's paid path: verify, reserve, run, settle on success only (faults aside). */
  async function paid(
    payload: unknown,
    resource: string,
    work: () => { value: ToolResult | Record<string, unknown>; ok: boolean },
  ): Promise<Paid> {
    if (faults.free) return { value: work().value };
    const ask = (error?: string) => ({
      required: rail.paymentRequired({ url: resource, description: resource }, error),
    });
    if (payload === undefined) return ask();
    const key = JSON.stringify(payload);
    const seen = settledPayloads.get(key);
    if (seen && faults.acceptReplay) return { value: work().value };
    const outcome = await rail.verify(payload);
    if (!outcome.valid) return ask(outcome.reason);
    if (!faults.acceptReplay) {
      if (reserved.has(outcome.payment.id)) return ask('payment_already_used');
      reserved.add(outcome.payment.id);
    }
    const { value, ok } = work();
    if (!ok && !faults.chargeOnFailure) return { value };
    const settled = await rail.settle(outcome.payment);
    if (settled.status !== 'settled') return ask(settled.reason);
    settledPayloads.set(key, outcome.payment);
    return {
      value,
      receipt: {
        success: true,
        transaction: settled.transaction,
        network: terms.network,
        payer: settled.payer,
      },
    };
  }

  /** 2025-11-25 after initialize, or 2026-07-28 (claimed in `_meta`, results framed as complete). */
  async function rpc(body: string, perServer: boolean): Promise<[number, unknown]> {
    const message = JSON.parse(body) as { id?: unknown; method: string; params?: Record<string, unknown> };
    const { id, method, params = {} } = message;
    if (id === undefined) return [202, undefined];
    const modern = !faults.no2026 && claimsModern(params);
    const ok = (result: object): [number, unknown] => [
      200,
      { jsonrpc: '2.0', id, result: modern ? complete(result) : result },
    ];
    if (method === 'initialize' && !modern) {
      return ok({
        protocolVersion: '2025-06-18',
        capabilities: { tools: {} },
        serverInfo: { name: 'fake', version: '0' },
      });
    }
    if (method === 'server/discover' && modern) return ok(DISCOVERED);
    if (method === 'tools/list') return ok({ tools: perServer ? [SHOUT, FAIL] : META });
    if (method !== 'tools/call')
      return [200, { jsonrpc: '2.0', id, error: { code: -32601, message: 'Method not found' } }];
    const name = String(params.name);
    const args = (params.arguments ?? {}) as Record<string, unknown>;
    if (JSON.stringify(args).length > 100 * 1024)
      return [200, { jsonrpc: '2.0', id, error: { code: -32602, message: 'Arguments over 100 KB' } }];
    const isMeta = !perServer;
    if (isMeta && !faults.chargedMetaTools) return ok({ content: [{ type: 'text', text: 'ok' }] });
    const payment = (params._meta as Record<string, unknown> | undefined)?.['x402/payment'];
    const outcome = await paid(payment, `mcp://tool/echoes.${name}`, () => {
      const result = isMeta ? { content: [{ type: 'text', text: 'ok' }] } : runTool(name, args);
      return { value: result, ok: result.isError !== true };
    });
    if ('required' in outcome) {
      const required = outcome.required as { accepts: object[] };
      const asked =
        modern && faults.modernAsks600
          ? { ...required, accepts: required.accepts.map((entry) => ({ ...entry, amount: '600' })) }
          : required;
      if (modern && faults.modernAsksInError)
        return [200, { jsonrpc: '2.0', id, error: { code: 402, message: 'Payment required', data: asked } }];
      // x402's MCP transport: an isError tool result carrying the PaymentRequired.
      return ok({
        isError: true,
        structuredContent: asked,
        content: [{ type: 'text', text: JSON.stringify(asked) }],
      });
    }
    const value = outcome.value as ToolResult;
    const receipt = modern && faults.modernDropsReceipt ? undefined : outcome.receipt;
    return ok(receipt ? { ...value, _meta: { ...value._meta, 'x402/payment-response': receipt } } : value);
  }

  async function handle(request: IncomingMessage, body: string, response: ServerResponse): Promise<void> {
    const url = new URL(request.url ?? '/', 'http://fake');
    const route = `${request.method} ${url.pathname}`;
    const payment = decodeHeader((request.headers['payment-signature'] as string | undefined) ?? null);
    const answerPaid = (outcome: Paid): void => {
      if ('required' in outcome) {
        response.writeHead(402, {
          'content-type': 'application/json',
          'payment-required': encodeHeader(outcome.required),
        });
        response.end('{}');
        return;
      }
      if (outcome.receipt) response.setHeader('payment-response', encodeHeader(outcome.receipt));
      sendJson(response, 200, outcome.value);
    };
    if (route === 'GET /health') return sendJson(response, 200, { status: 'ok' });
    if (route === 'GET /api/auth/challenge') return sendJson(response, 200, { message: 'sign this' });
    if (route === 'GET /api/servers') return sendJson(response, 200, { servers: [{ id: 'echoes' }] });
    if (route === 'GET /api/servers/echoes') {
      return sendJson(response, 200, {
        id: 'echoes',
        tier: 'tool_smoke_passed',
        smokeTool: 'shout',
        tools: [SHOUT, FAIL],
      });
    }
    if (route === 'GET /api/servers/echoes/tools') return sendJson(response, 200, { tools: [SHOUT, FAIL] });
    if (route === 'GET /api/payments/config') {
      if (faults.free) return sendJson(response, 200, { enabled: false });
      return sendJson(response, 200, {
        enabled: true,
        network: terms.network,
        chainId: terms.chainId,
        token: terms.asset,
        pricePerCall: faults.asks600 ? '500' : terms.pricePerCall.toString(),
        priceUsd: '0.0005',
        payTo: terms.payTo,
        scheme: terms.scheme,
      });
    }
    const tool = /^POST \/api\/servers\/echoes\/tools\/([a-z]+)$/.exec(route)?.[1];
    if (tool === 'shout' || tool === 'fail') {
      const args = ((JSON.parse(body) as { arguments?: Record<string, unknown> }).arguments ?? {}) as Record<
        string,
        unknown
      >;
      return answerPaid(
        await paid(payment, `http://fake/api/servers/echoes/tools/${tool}`, () => {
          const result = runTool(tool, args);
          return { value: result, ok: result.isError !== true };
        }),
      );
    }
    if (route === 'POST /api/verify') {
      const work = () => ({ value: { valid: true }, ok: true });
      if (faults.freeVerify) return sendJson(response, 200, work().value);
      return answerPaid(await paid(payment, 'http://fake/api/verify', work));
    }
    if (request.method === 'POST' && (url.pathname === '/mcp' || url.pathname === '/mcp/server/echoes')) {
      const [status, reply] = await rpc(body, url.pathname !== '/mcp');
      if (reply === undefined) {
        response.writeHead(status);
        response.end();
        return;
      }
      return sendJson(response, status, reply);
    }
    sendJson(response, 404, { error: 'not found' });
  }

  return (request: IncomingMessage, response: ServerResponse) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      handle(request, Buffer.concat(chunks).toString('utf8'), response).catch((err: unknown) =>
        sendJson(response, 500, { error: (err as Error).message }),
      );
    });
  };
}

describe('payment requirements against a gateway that is not Sigil, paying on anvil', function () {
  // Each run settles a dozen payments on anvil; on a busy machine that takes a while.
  this.timeout(240_000);
  let chain: DevChain;
  let server: TinyServer | undefined;
  before(async () => {
    chain = await startDevChain();
  });
  after(async () => {
    await chain?.stop();
  });
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  function railFor(faults: Faults): PaymentRailV1 {
    const options = railPlugin(chain, faults.asks600 ? { pricePerCall: 600 } : {}).plugin.options;
    return new X402EvmRail(configSchema.parse(options), { clock: systemClock });
  }

  async function check(
    faults: Faults,
    ids: readonly string[] = PAYMENT_IDS,
    lend: Partial<Pick<DeploymentTarget, 'payerKey' | 'rpcUrl'>> = {
      payerKey: chain.accounts.payer.privateKey,
      rpcUrl: chain.rpcUrl,
    },
  ): Promise<Record<string, CheckResult>> {
    server = await startTinyServer(fakeGateway(railFor(faults), faults));
    const report = await runDeployment(
      { runtimeUrl: server.url, gatewayUrl: server.url, ...lend },
      { requirements: REQUIREMENTS.filter((requirement) => ids.includes(requirement.id)) },
    );
    return Object.fromEntries(report.results.map((result) => [result.id, result]));
  }

  const notPassed = (results: Record<string, CheckResult>) =>
    Object.values(results)
      .filter((result) => result.status !== 'pass')
      .map((result) => `${result.id}: ${result.status}: ${result.reason}`);

  it('passes every payment requirement, and the tool-call checks it pays for, on a conforming gateway', async () => {
    const ids = [...PAYMENT_IDS, 'GW-8.argument-limit'];
    const results = await check({}, ids);
    expect(notPassed(results)).to.deep.equal([]);
    expect(Object.keys(results)).to.have.length(ids.length);
  });

  it('reports what needs money not applicable without a payer, or without an RPC, and says what to give', async () => {
    const withoutPayer = await check({}, [...PAYMENT_IDS, 'GW-8.argument-limit'], {});
    for (const id of [...PAYER_IDS, 'GW-8.argument-limit']) {
      expect(withoutPayer[id], id).to.include({ status: 'not-applicable' });
      expect(withoutPayer[id]?.reason, id).to.match(/--payer-key .*--rpc-url/);
    }
    const free = PAYMENT_IDS.filter((id) => !PAYER_IDS.includes(id));
    // A made-up proof stands in for a real one; this gateway asks for the payment before reading it.
    expect(
      notPassed(Object.fromEntries(free.map((id) => [id, withoutPayer[id] as CheckResult]))),
    ).to.deep.equal([]);
    await server?.close();
    const withoutRpc = await check({}, PAYER_IDS, { payerKey: chain.accounts.payer.privateKey });
    for (const id of PAYER_IDS) {
      expect(withoutRpc[id], id).to.include({ status: 'not-applicable' });
      expect(withoutRpc[id]?.reason, id).to.equal(
        'no --rpc-url was given: what a payment moved cannot be read on chain',
      );
    }
  });

  it('fails GW-7.x402-no-charge-on-failure when a failing call is charged, over REST and MCP', async () => {
    const results = await check({ chargeOnFailure: true }, ['GW-7.x402-no-charge-on-failure']);
    expect(results['GW-7.x402-no-charge-on-failure']).to.include({ status: 'fail' });
    expect(results['GW-7.x402-no-charge-on-failure']?.reason).to.match(
      /^failed calls were charged: POST \/api\/servers\/echoes\/tools\/fail .* cost the payer 500 base units; tools\/call fail .* cost the payer 500 base units$/,
    );
  });

  it('fails GW-3.x402-replay-refused when a payment runs again', async () => {
    const results = await check({ acceptReplay: true }, ['GW-3.x402-replay-refused']);
    expect(results['GW-3.x402-replay-refused']).to.include({ status: 'fail' });
    expect(results['GW-3.x402-replay-refused']?.reason).to.match(
      /^the same payment sent 3 times at once ran 3 call\(s\)/,
    );
  });

  it('fails the price and the charge when the gateway asks 600 base units', async () => {
    const results = await check({ asks600: true }, ['GW-8.x402-price', 'GW-3.x402-charge-exact']);
    expect(results['GW-8.x402-price']?.reason).to.match(
      /PAYMENT-REQUIRED disagrees with GET \/api\/payments\/config: amount 600 \(config: 500\)$/,
    );
    expect(results['GW-3.x402-charge-exact']?.reason).to.match(
      /, paid, cost the payer 600 base units \(0\.0006 USD\); the price is 500 base units \(0\.0005 USD\)$/,
    );
  });

  it('fails the 402 flow and the price on a gateway that charges nothing; what needs a charge does not apply', async () => {
    const results = await check({ free: true });
    for (const id of ['GW-4.x402-payment-required', 'GW-4.x402-verify-payment-required']) {
      expect(results[id], id).to.include({ status: 'fail' });
      expect(results[id]?.reason, id).to.match(
        /without a payment answered HTTP 200: the deployment charges nothing/,
      );
    }
    expect(results['GW-4.x402-mcp-payment-required']?.reason).to.match(
      /without a payment ran and answered a result/,
    );
    expect(results['GW-8.x402-price']?.reason).to.equal(
      'GET /api/payments/config says payments are off: the gateway spec charges 0.0005 USD per tool call',
    );
    expect(results['GW-4.x402-free-endpoints']).to.include({ status: 'pass' });
    for (const id of ['GW-3.x402-charge-exact', 'GW-3.x402-replay-refused']) {
      expect(results[id], id).to.include({ status: 'not-applicable' });
      expect(results[id]?.reason, id).to.match(/did not ask for a payment/);
    }
    expect(results['GW-7.x402-no-charge-on-failure']?.reason).to.match(/^no paid call failed/);
    for (const id of MODERN_IDS) {
      expect(results[id], id).to.include({ status: 'not-applicable' });
      expect(results[id]?.reason, id).to.match(
        /^tools\/call shout at POST \/mcp\/server\/echoes without a payment, at 2025-11-25, asked for no x402 payment \(HTTP 200 with a result\)/,
      );
    }
  });

  it('reports the 2026-07-28 payment requirements not applicable on a gateway that speaks only 2025-11-25', async () => {
    const results = await check({ no2026: true }, MODERN_IDS);
    for (const id of MODERN_IDS) {
      expect(results[id], id).to.include({ status: 'not-applicable' });
      expect(results[id]?.reason, id).to.match(/^the gateway does not serve MCP 2026-07-28 /);
    }
  });

  /** Each fault at 2026-07-28, the requirement it breaks, its 2025-11-25 twin (which passes), and the reason. */
  const MODERN_FAULTS: [string, Faults, string, string, RegExp][] = [
    [
      'an unpaid call asks in a JSON-RPC error',
      { modernAsksInError: true },
      'GW-4.x402-mcp-2026-payment-required',
      'GW-4.x402-mcp-payment-required',
      /^tools\/call \(MCP 2026-07-28\) shout at POST \/mcp\/server\/echoes carries its PaymentRequired in the data of JSON-RPC error 402 \(HTTP 200\); at 2025-11-25 the same call carries it in an isError result's structuredContent \(HTTP 200\), where x402 MCP clients look for it$/,
    ],
    [
      'an unpaid call asks 600 base units',
      { modernAsks600: true },
      'GW-4.x402-mcp-2026-payment-required',
      'GW-4.x402-mcp-payment-required',
      /^tools\/call \(MCP 2026-07-28\) shout at POST \/mcp\/server\/echoes asks .*"amount":"600".*; at 2025-11-25 the same call asks .*"amount":"500"/,
    ],
    [
      'a paid result carries no receipt',
      { modernDropsReceipt: true },
      'GW-3.x402-mcp-2026-charge-exact',
      'GW-3.x402-charge-exact',
      /^tools\/call \(MCP 2026-07-28\) shout at POST \/mcp\/server\/echoes, paid succeeded without _meta\["x402\/payment-response"\] \(x402: a paid response carries the settlement\)$/,
    ],
    [
      'a payment runs again',
      { acceptReplay: true },
      'GW-3.x402-mcp-2026-charge-exact',
      'GW-3.x402-charge-exact',
      /^tools\/call \(MCP 2026-07-28\) shout at POST \/mcp\/server\/echoes with a payment already settled without a payment ran and answered a result/,
    ],
  ];
  for (const [what, faults, id, twin, reason] of MODERN_FAULTS) {
    it(`fails ${id} when, at 2026-07-28, ${what}, while ${twin} passes`, async () => {
      const results = await check(faults, [id, twin]);
      expect(results[twin], twin).to.include({ status: 'pass' });
      expect(results[id], id).to.include({ status: 'fail' });
      expect(results[id]?.reason, id).to.match(reason);
    });
  }

  it('fails GW-4.x402-verify-payment-required when POST /api/verify is free', async () => {
    const results = await check({ freeVerify: true }, ['GW-4.x402-verify-payment-required']);
    expect(results['GW-4.x402-verify-payment-required']?.reason).to.match(
      /^POST \/api\/verify without a payment answered HTTP 200/,
    );
  });

  it('fails GW-4.x402-free-endpoints when meta-tools ask for a payment', async () => {
    const results = await check({ chargedMetaTools: true }, ['GW-4.x402-free-endpoints']);
    expect(results['GW-4.x402-free-endpoints']?.reason).to.equal(
      'free endpoints asked for a payment: the meta-tool turn_on (tools/call at POST /mcp); the meta-tool turn_off (tools/call at POST /mcp)',
    );
  });

  it('never shows the payer key, nor the RPC URL', async () => {
    const payerKey = chain.accounts.payer.privateKey;
    const results = await check({}, ['GW-3.x402-charge-exact']);
    const text = JSON.stringify(results);
    expect(text).not.to.include(payerKey.slice(2));
    expect(text).not.to.include(chain.rpcUrl);
  });
});
