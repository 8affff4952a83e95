import { expect } from 'chai';
import { newWallet } from '../../core/auth/support.ts';
import { setOnChain } from './ledger/support.ts';
import { describeEachDatabase } from '../../support/kernel.ts';
import { readSse, runtimeClient, type SseEvent } from './chat-support.ts';
import { internalKeyStack, type Stack } from './support.ts';

const INTERNAL_KEY = 'sk-internal-operator-key-77a0';
/** What one `hello there world` costs on the operator's key: ceil(1.15 × 9) base units. */
const RUN_COST = 11n;
const CONCURRENT = 100;

/**
 * The attack of issue 21 (Medium 7): a wallet sends many chat messages at once, each in its own
 * session, with a balance (or a budget) for about 30 of them. Before holds, the check before the
 * model ran was not a reservation: of 100, 57 ran, 30 were charged and 27 were answered free.
 */
describe('runtime chat: concurrent messages are reserved before the model runs', function () {
  this.timeout(180_000);

  describeEachDatabase('chat holds', (database) => {
    let stack: Stack;
    let close: () => Promise<void>;

    before(async () => {
      ({ stack, close } = await internalKeyStack(database, {
        operatorKey: INTERNAL_KEY,
        chat: { maxSessionsPerAgent: CONCURRENT, maxOutputTokens: 8 },
      }));
    });
    after(() => close?.());

    /** A wallet with `funds`, an agent and CONCURRENT open sessions; then every message at once. */
    async function attack(funds: bigint, budget?: { daily: string }) {
      const wallet = newWallet();
      const client = runtimeClient(stack.url('runtime'), await stack.signIn(wallet));
      await setOnChain(stack.runtime.ledger.ledger, wallet.address, funds);
      const agentId = (await client.json('POST', '/agents', { name: 'a', model: 'sigil-echo' })).body
        .id as string;
      if (budget)
        expect((await client.json('PUT', `/agents/${agentId}/budgets`, budget)).status).to.equal(200);
      const sessions: string[] = [];
      for (let i = 0; i < CONCURRENT; i++) {
        const opened = await client.json('POST', `/agents/${agentId}/sessions`, {});
        expect(opened.status).to.equal(201);
        sessions.push(opened.body.id as string);
      }
      const answers = await Promise.all(
        sessions.map(async (id) => {
          const res = await client.send('POST', `/agents/${agentId}/sessions/${id}/messages`, {
            content: 'hello there world',
          });
          if (res.status !== 200)
            return { status: res.status, body: (await res.json()) as Record<string, unknown> };
          return { status: 200, events: await readSse(res) };
        }),
      );
      const ran = answers.filter((a) => a.events?.some((e) => e.event === 'usage'));
      const refused = answers.filter((a) => a.status === 402);
      const costs = ran.map((a) => (a.events as SseEvent[]).find((e) => e.event === 'cost')!.data);
      const history = await client.json('GET', '/wallet/transactions?limit=200');
      const charges = (history.body.transactions as { kind: string; amount: string }[]).filter(
        (t) => t.kind === 'charge',
      );
      const ledger = stack.runtime.ledger.ledger;
      return { wallet, agentId, client, answers, ran, refused, costs, charges, ledger };
    }

    it('a balance for about 30: every message that ran was charged in full, none free, available never below 0', async () => {
      const { wallet, answers, ran, refused, costs, charges, ledger } = await attack(30n * RUN_COST);
      // Every message either ran or was refused up front with a 402, before the model saw it.
      expect(ran.length + refused.length).to.equal(CONCURRENT);
      expect(ran.length).to.be.greaterThan(0);
      expect(ran.length).to.be.at.most(30);
      expect(charges).to.have.length(ran.length);
      for (const cost of costs) {
        expect(cost.charged).to.equal(cost.platformCost);
        expect(cost.platformCost).to.equal(RUN_COST.toString());
      }
      for (const refusal of answers.filter((a) => a.status === 402))
        expect(refusal.body).to.deep.include({ code: 'payment_required' });
      const balance = await ledger.balance(wallet.address);
      expect(balance.available >= 0n).to.equal(true);
      expect(balance.unsettledSpend).to.equal(BigInt(ran.length) * RUN_COST);
      expect(balance.heldSpend).to.equal(0n);
      expect((await ledger.audit(wallet.address)).mismatches).to.deep.equal([]);
    });

    it('a daily budget for about 10 under plenty of balance: spend never passes the budget, none free', async () => {
      const { agentId, ran, costs, charges, ledger, client } = await attack(1_000_000n, {
        daily: String(10n * RUN_COST),
      });
      expect(ran.length).to.be.greaterThan(0);
      expect(ran.length).to.be.at.most(10);
      expect(charges).to.have.length(ran.length);
      for (const cost of costs) expect(cost.charged).to.equal(cost.platformCost);
      const budgets = await client.json('GET', `/agents/${agentId}/budgets`);
      expect(BigInt(budgets.body.daily.spent as string)).to.equal(BigInt(ran.length) * RUN_COST);
      expect(BigInt(budgets.body.daily.spent as string) <= 10n * RUN_COST).to.equal(true);
      expect((await ledger.audit()).mismatches).to.deep.equal([]);
    });

    it('a model that fails releases the hold: nothing charged, nothing left held', async () => {
      const wallet = newWallet();
      const client = runtimeClient(stack.url('runtime'), await stack.signIn(wallet));
      await setOnChain(stack.runtime.ledger.ledger, wallet.address, 1_000_000n);
      const agentId = (await client.json('POST', '/agents', { name: 'a', model: 'sigil-error' })).body
        .id as string;
      const session = (await client.json('POST', `/agents/${agentId}/sessions`, {})).body.id as string;
      const res = await client.send('POST', `/agents/${agentId}/sessions/${session}/messages`, {
        content: 'hi',
      });
      const events = await readSse(res);
      expect(events.map((e) => e.event)).to.include('error');
      expect(events.find((e) => e.event === 'cost')!.data).to.include({ charged: '0' });
      const balance = await stack.runtime.ledger.ledger.balance(wallet.address);
      expect(balance).to.include({ heldSpend: 0n, unsettledSpend: 0n, available: 1_000_000n });
    });
  });
});
