import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { UnsecuredJWT } from 'jose';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { DeploymentTarget } from '../../conformance/deployment/context.ts';
import { DEFAULT_PLUGINS } from '../../services/config.ts';
import { serve, type Serving } from '../../services/serve.ts';
import { ledgerOnChain } from '../services/runtime/ledger/chain-support.ts';
import { startDevChain, type DevChain } from '../support/chain.ts';
import { openTestKernel } from '../support/kernel.ts';
import {
  fakeSignedInService,
  payerKey,
  runRequirements,
  sendJson,
  startTinyServer,
  statuses,
  type TinyServer,
} from './support.ts';

const IDS = ['RT-7.session-validation', 'RT-7.missing-key-guidance', 'RT-8.cost-formula-byok'];

const run = (target: DeploymentTarget) => runRequirements(target, IDS);

describe('chat: conformance requirements (sessions, the missing-key hint, the BYOK cost)', function () {
  this.timeout(120_000);
  let chain: DevChain;
  before(async () => {
    chain = await startDevChain();
  });
  after(() => chain?.stop());

  describe('against Sigil on the dev chain, with provider-local', () => {
    let serving: Serving;
    let url: string;
    let dir: string;
    before(async () => {
      dir = mkdtempSync(join(tmpdir(), 'sigil-chat-conformance-'));
      const kernel = await openTestKernel({
        config: {
          runtime: { port: 0 },
          ledger: ledgerOnChain(chain, { confirmations: 1, pollIntervalMs: 100 }),
          vault: { persistenceDir: dir },
          plugins: [
            ...DEFAULT_PLUGINS.map((resolve) => ({ resolve, enabled: true, options: {} })),
            { resolve: 'provider-local', enabled: true, options: {} },
          ],
        },
      });
      serving = await serve(kernel, ['runtime']);
      url = serving.urls.runtime as string;
    });
    after(async () => {
      await serving?.stop();
      rmSync(dir, { recursive: true, force: true });
    });

    it('passes all three, the cost one with a funded payer and the chain', async () => {
      const results = await run({
        runtimeUrl: url,
        gatewayUrl: url,
        payerKey: await payerKey(chain),
        rpcUrl: chain.rpcUrl,
      });
      for (const id of IDS) expect(results[id]?.status, `${id}: ${results[id]?.reason}`).to.equal('pass');
    });

    it('without a payer, the cost requirement is not applicable, and says why', async () => {
      const results = await run({ runtimeUrl: url, gatewayUrl: url });
      expect(statuses(results)).to.deep.equal({
        'RT-7.session-validation': 'pass',
        'RT-7.missing-key-guidance': 'pass',
        'RT-8.cost-formula-byok': 'not-applicable',
      });
      expect(results['RT-8.cost-formula-byok']?.reason).to.match(/--payer-key/);
    });
  });

  describe('against a runtime that is not Sigil', () => {
    let server: TinyServer | undefined;
    afterEach(async () => {
      await server?.close();
      server = undefined;
    });
    async function check(faults: Faults) {
      server = await startTinyServer(fakeRuntime(faults, chain.token.address));
      return run({
        runtimeUrl: server.url,
        gatewayUrl: server.url,
        payerKey: await payerKey(chain),
        rpcUrl: chain.rpcUrl,
      });
    }

    it('conforming (its own messages, OPENAI_API_KEY as its slot), it passes all three', async () => {
      const results = await check({});
      expect(statuses(results), JSON.stringify(results, null, 1)).to.deep.equal({
        'RT-7.session-validation': 'pass',
        'RT-7.missing-key-guidance': 'pass',
        'RT-8.cost-formula-byok': 'pass',
      });
    });

    it('a platformCost rounded down fails the cost formula, with both numbers', async () => {
      const results = await check({ floorCost: true });
      expect(results['RT-8.cost-formula-byok']?.status).to.equal('fail');
      expect(results['RT-8.cost-formula-byok']?.reason).to.match(
        /platformCost 0, but ceil\(0\.10 × 9 \+ 500 × 0\) = 1/,
      );
    });

    it('a ledger charge other than the platformCost fails the cost formula', async () => {
      const results = await check({ chargesMore: true });
      expect(results['RT-8.cost-formula-byok']?.status).to.equal('fail');
      expect(results['RT-8.cost-formula-byok']?.reason).to.match(/the ledger charged 2, but .* is 1/);
    });

    it('a refusal whose hint names no slot fails the missing-key guidance', async () => {
      const results = await check({ hintWithoutSlot: true });
      expect(results['RT-7.missing-key-guidance']?.status).to.equal('fail');
      expect(results['RT-7.missing-key-guidance']?.reason).to.match(/hint names no key slot/);
    });

    it('a session for another wallet’s agent, or a malformed body, accepted fails the session validation', async () => {
      let results = await check({ ownerNotChecked: true });
      expect(results['RT-7.session-validation']?.reason).to.match(
        /another wallet's .* expected HTTP 404, got 201/,
      );
      await server?.close();
      results = await check({ lenientBody: true });
      expect(results['RT-7.session-validation']?.reason).to.match(
        /servers not a list .* expected HTTP 400, got 201/,
      );
    });
  });
});

interface Faults {
  floorCost?: boolean;
  chargesMore?: boolean;
  hintWithoutSlot?: boolean;
  ownerNotChecked?: boolean;
  lenientBody?: boolean;
}

/**
 * A chat runtime written differently from Sigil: its own messages, OPENAI_API_KEY as its slot, any
 * deposit counted at once (1 USD available), one model (`echo-1`) whose every answer costs 9 base
 * units; each fault breaks the requirement it is about.
 */
function fakeRuntime(faults: Faults, token: string) {
  const agents = new Map<string, { owner: string; model: string }>();
  const sessions = new Map<string, string>();
  const keys = new Set<string>();
  const charges = new Map<string, { kind: string; amount: string; agentId: string }[]>();
  return fakeSignedInService(({ request, route, json }, response) => {
    if (route === 'GET /wallet/provider-vault/message')
      return sendJson(response, 200, { message: 'fake vault: sign me' });
    const auth = /^Bearer (.+)$/.exec(request.headers.authorization ?? '')?.[1];
    if (!auth) return sendJson(response, 401, { error: 'sign in' });
    const owner = String(UnsecuredJWT.decode(auth).payload.sub);
    if (route === 'GET /wallet/balance')
      return sendJson(response, 200, {
        onChainBalance: 1_000_000,
        unsettledSpend: 0,
        pendingWithdrawals: 0,
        available: 1_000_000,
      });
    if (route === 'GET /wallet/deposit-address')
      return sendJson(response, 200, {
        address: privateKeyToAccount(generatePrivateKey()).address,
        token: { address: token },
      });
    if (route === 'GET /wallet/transactions')
      return sendJson(response, 200, { transactions: charges.get(owner) ?? [] });
    if (
      route === 'PUT /wallet/provider-vault/keys/OPENAI_API_KEY' ||
      route === 'PUT /wallet/provider-vault/keys/PROVIDER_API_KEY'
    ) {
      keys.add(owner);
      return sendJson(response, 201, { stored: true });
    }
    if (route === 'POST /wallet/provider-vault/unlock') return sendJson(response, 200, { unlocked: true });
    if (route === 'POST /agents') {
      const id = randomUUID();
      agents.set(id, { owner, model: String(json().model) });
      return sendJson(response, 201, { id });
    }
    const open = /^POST \/agents\/([^/]+)\/sessions$/.exec(route);
    const message = /^POST \/agents\/([^/]+)\/sessions\/([^/]+)\/messages$/.exec(route);
    const agentId = (open ?? message)?.[1] ?? '';
    const agent = agents.get(agentId);
    if (open) {
      if (!agent || (agent.owner !== owner && !faults.ownerNotChecked))
        return sendJson(response, 404, { error: 'no such agent' });
      const input = json();
      const valid =
        Object.keys(input).every((k) => k === 'servers' || k === 'system') &&
        (input.servers === undefined ||
          (Array.isArray(input.servers) && input.servers.every((s) => /^[a-z0-9-]+$/.test(String(s))))) &&
        (input.system === undefined || typeof input.system === 'string');
      if (!valid && !faults.lenientBody) return sendJson(response, 400, { error: 'bad body' });
      if (agent.model !== 'echo-1')
        return sendJson(response, 422, { error: 'unknown model', details: { offered: ['echo-1'] } });
      const id = randomUUID();
      sessions.set(id, agentId);
      return sendJson(response, 201, { id });
    }
    if (message) {
      if (!agent || agent.owner !== owner || sessions.get(message[2] ?? '') !== agentId)
        return sendJson(response, 404, { error: 'no such session' });
      if (!keys.has(owner))
        return sendJson(response, 403, {
          error: 'no key',
          hint: faults.hintWithoutSlot
            ? 'Store your key in the vault first'
            : 'Store your key: PUT /wallet/provider-vault/keys/OPENAI_API_KEY, then unlock',
        });
      const platformCost = faults.floorCost ? 0 : 1;
      const list = charges.get(owner) ?? [];
      list.push({ kind: 'charge', amount: String(faults.chargesMore ? 2 : platformCost), agentId });
      charges.set(owner, list);
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      const send = (event: string, data: unknown) =>
        response.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
      send('text-delta', { text: 'hello' });
      send('usage', { inputTokens: 3, outputTokens: 3, baseLlmCost: '9' });
      send('cost', { keyKind: 'byok', baseLlmCost: 9, toolCalls: 0, platformCost });
      send('done', {});
      response.end();
      return;
    }
    return sendJson(response, 404, { error: 'not found' });
  });
}
