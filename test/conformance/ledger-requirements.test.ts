import { randomUUID } from 'node:crypto';
import { expect } from 'chai';
import { UnsecuredJWT } from 'jose';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import type { DeploymentTarget } from '../../conformance/deployment/context.ts';
import { serve, type Serving } from '../../services/serve.ts';
import {
  fakeSignedInService,
  payerKey,
  runRequirements,
  sendJson,
  startTinyServer,
  statuses,
  type TinyServer,
} from './support.ts';
import { startDevChain, type DevChain } from '../support/chain.ts';
import { openTestKernel } from '../support/kernel.ts';
import { pluginsWithLocalProvider } from '../services/runtime/support.ts';
import { ledgerOnChain } from '../services/runtime/ledger/chain-support.ts';

const IDS = [
  'RT-2.ledger-balance-rule',
  'RT-2.ledger-deposit-and-withdrawal',
  'RT-7.ledger-budget-refusal',
  'RT-8.ledger-minimum-balance',
];

const run = (target: DeploymentTarget) => runRequirements(target, IDS);

describe('ledger: conformance requirements', function () {
  this.timeout(120_000);
  let chain: DevChain;
  before(async () => {
    chain = await startDevChain();
  });
  after(() => chain?.stop());

  describe('against Sigil on the dev chain', () => {
    let serving: Serving;
    let url: string;
    before(async () => {
      const kernel = await openTestKernel({
        config: {
          runtime: { port: 0 },
          ledger: ledgerOnChain(chain, { confirmations: 1, pollIntervalMs: 100 }),
          // Agents need a model a provider offers, as under sigil up.
          plugins: pluginsWithLocalProvider(),
        },
      });
      serving = await serve(kernel, ['runtime']);
      url = serving.urls.runtime as string;
    });
    after(() => serving?.stop());

    it('passes all four, the deposit one with a funded payer and the chain', async () => {
      const results = await run({
        runtimeUrl: url,
        gatewayUrl: url,
        payerKey: await payerKey(chain),
        rpcUrl: chain.rpcUrl,
      });
      for (const id of IDS) expect(results[id]?.status, `${id}: ${results[id]?.reason}`).to.equal('pass');
    });

    it('without a payer, the deposit requirement is not applicable, and says why', async () => {
      const results = await run({ runtimeUrl: url, gatewayUrl: url });
      expect(results['RT-2.ledger-deposit-and-withdrawal']).to.include({ status: 'not-applicable' });
      expect(results['RT-2.ledger-deposit-and-withdrawal']?.reason).to.match(/--payer-key/);
      expect(results['RT-7.ledger-budget-refusal']?.status).to.equal('pass');
    });
  });

  describe('against a runtime that is not Sigil', () => {
    let server: TinyServer | undefined;
    afterEach(async () => {
      await server?.close();
      server = undefined;
    });
    async function check(faults: Faults, target: Partial<DeploymentTarget> = {}) {
      server = await startTinyServer(fakeRuntime(faults));
      return run({ runtimeUrl: server.url, gatewayUrl: server.url, ...target });
    }

    it('conforming (its own routes, numbers and messages), it passes what it can without a chain', async () => {
      expect(statuses(await check({}))).to.deep.equal({
        'RT-2.ledger-balance-rule': 'pass',
        'RT-2.ledger-deposit-and-withdrawal': 'not-applicable',
        'RT-7.ledger-budget-refusal': 'pass',
        'RT-8.ledger-minimum-balance': 'pass',
      });
    });

    it('an available balance that is not onChainBalance − unsettledSpend − pendingWithdrawals fails the rule', async () => {
      const results = await check({ availableIgnoresPending: true });
      expect(results['RT-2.ledger-balance-rule']?.status).to.equal('fail');
      expect(results['RT-2.ledger-balance-rule']?.reason).to.match(/available is 1500000, but .* = 1000000/);
    });

    it('a budget check that lets a spend over the daily budget through fails the budget refusal', async () => {
      const results = await check({ ignoresBudgets: true });
      expect(results['RT-7.ledger-budget-refusal']?.status).to.equal('fail');
      expect(results['RT-7.ledger-budget-refusal']?.reason).to.match(
        /expected a refusal \(HTTP 4xx\), got 200/,
      );
    });

    it('a refusal that does not say what is left or when it resets fails the budget refusal', async () => {
      let results = await check({ refusalWithoutReset: true });
      expect(results['RT-7.ledger-budget-refusal']?.reason).to.match(/does not say when the limit resets/);
      await server?.close();
      results = await check({ rollingWeekForDaily: true });
      expect(results['RT-7.ledger-budget-refusal']?.reason).to.match(/resetsAt .* is not within the window/);
    });

    it('no minimum balance (an empty wallet may chat) fails the minimum balance requirement', async () => {
      const results = await check({ noMinimumBalance: true });
      expect(results['RT-8.ledger-minimum-balance']?.status).to.equal('fail');
      expect(results['RT-8.ledger-minimum-balance']?.reason).to.match(
        /expected a refusal \(HTTP 4xx\), got 200/,
      );
    });

    it('a deposit address whose deposits never count fails the deposit requirement', async function () {
      const results = await check({}, { payerKey: await payerKey(chain), rpcUrl: chain.rpcUrl });
      expect(results['RT-2.ledger-deposit-and-withdrawal']?.status).to.equal('fail');
      expect(results['RT-2.ledger-deposit-and-withdrawal']?.reason).to.match(/the deposit was not counted/);
    });

    it('a runtime without the ledger routes is not applicable, with the reason', async () => {
      const results = await check({ noLedger: true });
      for (const id of IDS) {
        expect(results[id]?.status, id).to.equal('not-applicable');
        expect(results[id]?.reason, id).to.match(/no wallet ledger/);
      }
    });
  });
});

interface Faults {
  availableIgnoresPending?: boolean;
  ignoresBudgets?: boolean;
  refusalWithoutReset?: boolean;
  /** Says a daily budget resets in a week. */
  rollingWeekForDaily?: boolean;
  noMinimumBalance?: boolean;
  noLedger?: boolean;
  /** The token its deposit address takes (the dev chain's by default: its first deployment's address). */
  token?: string;
}

/**
 * A runtime written differently from Sigil: numbers as JSON integers, its own messages, rolling
 * windows (a daily budget resets 24 h after now), a pending withdrawal already on every wallet, and a
 * deposit address whose deposits it never reads.
 */
function fakeRuntime(faults: Faults) {
  const agents = new Map<string, { owner: string; daily: number | null; monthly: number | null }>();
  // Ignoring budgets, it also lets anyone chat: the over-budget check then answers 200 outright.
  const minimum = faults.noMinimumBalance || faults.ignoresBudgets ? 0 : 10_000;
  return fakeSignedInService(({ request, route, json }, response) => {
    if (faults.noLedger) return sendJson(response, 404, { error: 'not found' });
    const auth = /^Bearer (.+)$/.exec(request.headers.authorization ?? '')?.[1];
    if (!auth) return sendJson(response, 401, { error: 'sign in' });
    const owner = String(UnsecuredJWT.decode(auth).payload.sub);
    if (route === 'GET /wallet/balance') {
      // Every wallet shows 1.5 USD on chain, 0.5 USD of it pending withdrawal.
      if (faults.availableIgnoresPending) {
        // 1.5 USD on chain, 0.5 USD of it pending withdrawal, and available forgets that.
        return sendJson(response, 200, {
          onChainBalance: 1_500_000,
          unsettledSpend: 0,
          pendingWithdrawals: 500_000,
          available: 1_500_000,
        });
      }
      return sendJson(response, 200, {
        onChainBalance: 0,
        unsettledSpend: 0,
        pendingWithdrawals: 0,
        available: 0,
        minimumBalance: minimum,
      });
    }
    if (route === 'GET /wallet/deposit-address') {
      return sendJson(response, 200, {
        address: privateKeyToAccount(generatePrivateKey()).address,
        token: { address: faults.token ?? '0x5FbDB2315678afecb367f032d93F642f64180aa3' },
      });
    }
    if (route === 'POST /agents') {
      const id = randomUUID();
      agents.set(id, { owner, daily: null, monthly: null });
      return sendJson(response, 201, { id });
    }
    const budgets = /^PUT \/agents\/([^/]+)\/budgets$/.exec(route);
    const check = /^POST \/agents\/([^/]+)\/budget-check$/.exec(route);
    const agent = agents.get((budgets ?? check)?.[1] ?? '');
    if ((budgets || check) && (!agent || agent.owner !== owner))
      return sendJson(response, 404, { error: 'no agent' });
    if (budgets && agent) {
      const input = json() as { daily?: number | string | null; monthly?: number | string | null };
      if (input.daily !== undefined) agent.daily = input.daily === null ? null : Number(input.daily);
      if (input.monthly !== undefined) agent.monthly = input.monthly === null ? null : Number(input.monthly);
      return sendJson(response, 200, { daily: agent.daily, monthly: agent.monthly });
    }
    if (check && agent) {
      const amount = Number((json() as { amount?: string }).amount ?? 0);
      const refuse = (limit: string, remaining: number, resetsInMs: number | undefined, extra = {}) =>
        sendJson(response, 429, {
          code: 'over_limit',
          message: `over the ${limit} limit`,
          details: {
            limit,
            remaining,
            ...(resetsInMs === undefined || faults.refusalWithoutReset
              ? {}
              : { resetsAt: new Date(Date.now() + resetsInMs).toISOString() }),
            ...extra,
          },
        });
      if (!faults.ignoresBudgets) {
        if (agent.daily !== null && amount > agent.daily) {
          return refuse('daily', agent.daily, faults.rollingWeekForDaily ? 7 * 86_400_000 : 86_400_000);
        }
        if (agent.monthly !== null && amount > agent.monthly)
          return refuse('monthly', agent.monthly, 30 * 86_400_000);
      }
      if (minimum > 0) return refuse('minimum_balance', 0, undefined, { limitAmount: minimum });
      return sendJson(response, 200, { ok: true });
    }
    return sendJson(response, 404, { error: 'not found' });
  });
}
