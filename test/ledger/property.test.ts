import { expect } from 'chai';
import { SpendRefused } from '../../services/runtime/ledger/errors.ts';
import type { Ledger } from '../../services/runtime/ledger/ledger.ts';
import { describeEachDatabase } from '../support/kernel.ts';
import { openLedgerWorld, randomWallet, seededRandom, type LedgerWorld } from './support.ts';

/** Seeds: fixed ones always, plus one per run (printed on failure) unless LEDGER_PROPERTY_SEED pins it. */
const SEEDS = [1, 2, 3, 0xc0ffee, Number(process.env.LEDGER_PROPERTY_SEED ?? Date.now() % 2 ** 31)];
const STEPS = Number(process.env.LEDGER_PROPERTY_STEPS ?? 150);

describeEachDatabase('ledger: the balance rule holds for random sequences (property)', (database) => {
  let world: LedgerWorld;
  let ledger: Ledger;
  before(async () => {
    world = await openLedgerWorld(database);
    ledger = world.ledger;
  });
  after(() => world?.close());

  for (const seed of SEEDS) {
    it(`seed ${seed}: deposits, charges, replays and clock moves keep available = onChain − unsettled − pending ≥ 0`, async function () {
      this.timeout(120_000);
      const random = seededRandom(seed);
      const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
      const amount = (max: number) => BigInt(1 + Math.floor(random() * max));
      const wallets = [randomWallet(), randomWallet()];
      const model = new Map<string, { onChain: bigint; charged: bigint; block: bigint }>();
      const agents: {
        wallet: string;
        id: string;
        daily: bigint | null;
        charges: { at: number; amount: bigint }[];
      }[] = [];
      const keys: { wallet: string; agentId: string; amount: bigint; key: string }[] = [];
      for (const wallet of wallets) {
        model.set(wallet, { onChain: 0n, charged: 0n, block: 0n });
        for (let i = 0; i < 2; i++) {
          const id = (await world.service.agents.create(wallet, { name: `a${i}`, model: 'm' })).id;
          const daily = random() < 0.5 ? amount(20_000) : null;
          await ledger.setBudgets(wallet, id, { daily, weekly: null, monthly: null });
          agents.push({ wallet, id, daily, charges: [] });
        }
      }
      const context = () => `seed ${seed}`;
      for (let step = 0; step < STEPS; step++) {
        const roll = random();
        if (roll < 0.2) {
          const wallet = pick(wallets);
          const state = model.get(wallet)!;
          state.onChain += amount(10_000);
          state.block += 1n;
          await ledger.recordOnChainBalance(wallet, state.onChain, state.block);
        } else if (roll < 0.8) {
          // A batch of concurrent charges, some replaying earlier keys.
          const batch = Array.from({ length: 1 + Math.floor(random() * 8) }, () => {
            if (keys.length > 0 && random() < 0.15) return { ...pick(keys), replay: true };
            const agent = pick(agents);
            return {
              wallet: agent.wallet,
              agentId: agent.id,
              amount: amount(4000),
              key: `k${step}-${random()}`,
              replay: false,
            };
          });
          const results = await Promise.allSettled(
            batch.map((c) =>
              ledger.charge({
                wallet: c.wallet,
                agentId: c.agentId,
                amount: c.amount,
                idempotencyKey: c.key,
              }),
            ),
          );
          results.forEach((result, i) => {
            const c = batch[i]!;
            if (result.status === 'rejected') {
              expect(result.reason, context()).to.be.instanceOf(SpendRefused);
              return;
            }
            if (!result.value.replayed) {
              model.get(c.wallet)!.charged += c.amount;
              agents
                .find((agent) => agent.id === c.agentId)!
                .charges.push({ at: world.clock.now().getTime(), amount: c.amount });
              keys.push({ wallet: c.wallet, agentId: c.agentId, amount: c.amount, key: c.key });
            }
          });
        } else if (roll < 0.9) {
          world.clock.advance(Math.floor(random() * 30 * 3_600_000));
        } else {
          // Limits change, but never below what the window has spent: then spent ≤ limit must always hold.
          const agent = pick(agents);
          const spent = (await ledger.budgets(agent.wallet, agent.id)).daily.spent;
          agent.daily = random() < 0.3 ? null : spent + amount(20_000) - 1n;
          await ledger.setBudgets(agent.wallet, agent.id, {
            daily: agent.daily,
            weekly: null,
            monthly: null,
          });
        }
        for (const wallet of wallets) {
          const balance = await ledger.balance(wallet);
          const state = model.get(wallet)!;
          expect(balance.onChainBalance, context()).to.equal(state.onChain);
          expect(balance.unsettledSpend, context()).to.equal(state.charged);
          expect(balance.available, context()).to.equal(
            balance.onChainBalance - balance.unsettledSpend - balance.pendingWithdrawals,
          );
          expect(balance.available >= 0n, `${context()}: available ${balance.available}`).to.equal(true);
        }
        for (const agent of agents) {
          const budgets = await ledger.budgets(agent.wallet, agent.id);
          const dayStart = budgets.daily.start.getTime();
          const spentToday = agent.charges
            .filter((c) => c.at >= dayStart)
            .reduce((sum, c) => sum + c.amount, 0n);
          expect(budgets.daily.spent, context()).to.equal(spentToday);
          if (agent.daily !== null) expect(spentToday <= agent.daily, context()).to.equal(true);
        }
      }
      const audit = await ledger.audit();
      expect(audit.mismatches, context()).to.deep.equal([]);
    });
  }
});
