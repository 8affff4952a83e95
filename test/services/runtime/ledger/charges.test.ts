import { expect } from 'chai';
import { SigilError } from '@sigil/plugin-api';
import { SpendRefused } from '../../../../services/runtime/ledger/errors.ts';
import type { Ledger } from '../../../../services/runtime/ledger/ledger.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { MIDWEEK, openLedgerWorld, randomWallet, setOnChain, type LedgerWorld } from './support.ts';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

async function refusalOf(attempt: Promise<unknown>): Promise<SpendRefused> {
  try {
    await attempt;
  } catch (err) {
    if (err instanceof SpendRefused) return err;
    throw err;
  }
  throw new Error('expected a refusal, but it was allowed');
}

describeEachDatabase('ledger: charges', (database) => {
  let world: LedgerWorld;
  let ledger: Ledger;
  before(async () => {
    world = await openLedgerWorld(database);
    ledger = world.ledger;
  });
  after(() => world?.close());
  beforeEach(() => world.clock.set(new Date(MIDWEEK)));

  async function walletWithAgent(onChain: bigint): Promise<{ wallet: string; agentId: string }> {
    const wallet = randomWallet();
    const agent = await world.service.agents.create(wallet, { name: 'a', model: 'm' });
    if (onChain > 0n) await setOnChain(ledger, wallet, onChain);
    return { wallet, agentId: agent.id };
  }

  it('1,000 concurrent charges never spend more than available: exactly 500 of 1,000 units each succeed', async function () {
    this.timeout(120_000);
    const { wallet, agentId } = await walletWithAgent(500_000n);
    const outcomes = await Promise.allSettled(
      Array.from({ length: 1000 }, (_, i) =>
        ledger.charge({ wallet, agentId, amount: 1000n, idempotencyKey: `c-${i}` }),
      ),
    );
    const refused = outcomes.filter((o) => o.status === 'rejected');
    expect(outcomes.length - refused.length).to.equal(500);
    for (const o of refused) {
      expect((o as PromiseRejectedResult).reason).to.be.instanceOf(SpendRefused);
      expect(((o as PromiseRejectedResult).reason as SpendRefused).limit).to.equal('available');
    }
    const balance = await ledger.balance(wallet);
    expect(balance.unsettledSpend).to.equal(500_000n);
    expect(balance.available).to.equal(0n);
    expect((await ledger.audit(wallet)).ok).to.equal(true);
  });

  it('1,000 concurrent charges never exceed a daily budget: exactly 300 of 1,000 units each succeed', async function () {
    this.timeout(120_000);
    const { wallet, agentId } = await walletWithAgent(10_000_000n);
    await ledger.setBudgets(wallet, agentId, { daily: 300_000n, weekly: null, monthly: null });
    const outcomes = await Promise.allSettled(
      Array.from({ length: 1000 }, (_, i) =>
        ledger.charge({ wallet, agentId, amount: 1000n, idempotencyKey: `d-${i}` }),
      ),
    );
    const succeeded = outcomes.filter((o) => o.status === 'fulfilled').length;
    expect(succeeded).to.equal(300);
    for (const o of outcomes.filter((o) => o.status === 'rejected')) {
      expect(((o as PromiseRejectedResult).reason as SpendRefused).limit).to.equal('daily');
    }
    const budgets = await ledger.budgets(wallet, agentId);
    expect(budgets.daily.spent).to.equal(300_000n);
    expect(budgets.daily.remaining).to.equal(0n);
    expect((await ledger.balance(wallet)).available).to.equal(9_700_000n);
    expect((await ledger.audit(wallet)).ok).to.equal(true);
  });

  it('two agents of one wallet share its available balance under concurrency; each keeps its own budget', async function () {
    this.timeout(60_000);
    const { wallet, agentId: first } = await walletWithAgent(150_000n);
    const second = (await world.service.agents.create(wallet, { name: 'b', model: 'm' })).id;
    await ledger.setBudgets(wallet, first, { daily: 100_000n, weekly: null, monthly: null });
    const outcomes = await Promise.allSettled(
      Array.from({ length: 400 }, (_, i) =>
        ledger.charge({ wallet, agentId: i % 2 ? first : second, amount: 1000n, idempotencyKey: `s-${i}` }),
      ),
    );
    expect(outcomes.filter((o) => o.status === 'fulfilled')).to.have.length(150);
    expect((await ledger.budgets(wallet, first)).daily.spent <= 100_000n).to.equal(true);
    expect((await ledger.balance(wallet)).available).to.equal(0n);
  });

  it('an idempotency key charges once: 50 concurrent replays give one entry, all answering the same charge', async () => {
    const { wallet, agentId } = await walletWithAgent(1_000_000n);
    const results = await Promise.all(
      Array.from({ length: 50 }, () =>
        ledger.charge({ wallet, agentId, amount: 700n, idempotencyKey: 'chat-42' }),
      ),
    );
    expect(new Set(results.map((r) => r.entry.id)).size).to.equal(1);
    expect(results.filter((r) => !r.replayed)).to.have.length(1);
    expect((await ledger.balance(wallet)).unsettledSpend).to.equal(700n);
    const later = await ledger.charge({ wallet, agentId, amount: 700n, idempotencyKey: 'chat-42' });
    expect(later).to.deep.include({ replayed: true });
    expect(later.entry.id).to.equal(results[0]!.entry.id);
  });

  it('a key reused for another amount or agent is a 409 conflict and charges nothing', async () => {
    const { wallet, agentId } = await walletWithAgent(1_000_000n);
    await ledger.charge({ wallet, agentId, amount: 700n, idempotencyKey: 'k' });
    const other = (await world.service.agents.create(wallet, { name: 'x', model: 'm' })).id;
    for (const attempt of [
      () => ledger.charge({ wallet, agentId, amount: 701n, idempotencyKey: 'k' }),
      () => ledger.charge({ wallet, agentId: other, amount: 700n, idempotencyKey: 'k' }),
    ]) {
      const err = await attempt().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).to.be.instanceOf(SigilError);
      expect((err as SigilError).code).to.equal('conflict');
    }
    expect((await ledger.balance(wallet)).unsettledSpend).to.equal(700n);
  });

  it('the same key in two wallets is two charges: keys are unique per wallet', async () => {
    const a = await walletWithAgent(10_000n);
    const b = await walletWithAgent(10_000n);
    await ledger.charge({ ...a, amount: 10n, idempotencyKey: 'shared' });
    const second = await ledger.charge({ ...b, amount: 10n, idempotencyKey: 'shared' });
    expect(second.replayed).to.equal(false);
  });

  it('a refused charge records nothing, so its key may charge once funds arrive', async () => {
    const { wallet, agentId } = await walletWithAgent(0n);
    const refusal = await refusalOf(
      ledger.charge({ wallet, agentId, amount: 5000n, idempotencyKey: 'later' }),
    );
    expect(refusal.code).to.equal('payment_required');
    expect(refusal.details).to.deep.equal({
      reason: 'insufficient_funds',
      limit: 'available',
      requested: '5000',
      remaining: '0',
      agentId,
    });
    expect((await ledger.history(wallet, { limit: 10 })).entries).to.have.length(0);
    await setOnChain(ledger, wallet, 5000n);
    expect(
      (await ledger.charge({ wallet, agentId, amount: 5000n, idempotencyKey: 'later' })).replayed,
    ).to.equal(false);
  });

  it('a budget refusal names the window, the amount left, the limit and when it resets (calendar UTC)', async () => {
    const { wallet, agentId } = await walletWithAgent(10_000_000n);
    await ledger.setBudgets(wallet, agentId, { daily: 5000n, weekly: 8000n, monthly: 20_000n });
    await ledger.charge({ wallet, agentId, amount: 3000n, idempotencyKey: 'a' });
    const daily = await refusalOf(ledger.charge({ wallet, agentId, amount: 2001n, idempotencyKey: 'b' }));
    expect(daily.details).to.deep.equal({
      reason: 'budget_exceeded',
      limit: 'daily',
      requested: '2001',
      remaining: '2000',
      limitAmount: '5000',
      resetsAt: '2026-03-19T00:00:00.000Z',
      agentId,
    });
    expect(daily.message).to.match(/daily budget has 2000 base units \(0\.002 USD\) left/);
    // The next day: the daily window is empty, the weekly one (Monday 2026-03-16) still counts 3000.
    world.clock.advance(DAY);
    await ledger.charge({ wallet, agentId, amount: 5000n, idempotencyKey: 'c' });
    const weekly = await refusalOf(ledger.charge({ wallet, agentId, amount: 1n, idempotencyKey: 'd' }));
    expect(weekly.details).to.include({ limit: 'daily', remaining: '0' });
    world.clock.advance(DAY);
    const week = await refusalOf(ledger.charge({ wallet, agentId, amount: 1n, idempotencyKey: 'e' }));
    expect(week.details).to.include({
      limit: 'weekly',
      remaining: '0',
      resetsAt: '2026-03-23T00:00:00.000Z',
    });
  });

  it('windows roll over at 00:00 UTC, Monday 00:00 UTC and the 1st 00:00 UTC, to the millisecond', async () => {
    const { wallet, agentId } = await walletWithAgent(10_000_000n);
    // Sunday 2026-03-29 23:59:59.999 UTC, two days before a new month.
    world.clock.set(new Date(Date.UTC(2026, 2, 29, 23, 59, 59, 999)));
    await ledger.setBudgets(wallet, agentId, { daily: 100n, weekly: 100n, monthly: 150n });
    await ledger.charge({ wallet, agentId, amount: 100n, idempotencyKey: 'sun' });
    expect(
      (await refusalOf(ledger.charge({ wallet, agentId, amount: 1n, idempotencyKey: 'x' }))).limit,
    ).to.equal('daily');
    world.clock.advance(1); // Monday 00:00:00.000: new day and new week, same month
    const monday = await refusalOf(ledger.charge({ wallet, agentId, amount: 51n, idempotencyKey: 'y' }));
    expect(monday.details).to.include({
      limit: 'monthly',
      remaining: '50',
      resetsAt: '2026-04-01T00:00:00.000Z',
    });
    await ledger.charge({ wallet, agentId, amount: 50n, idempotencyKey: 'mon' });
    world.clock.set(new Date(Date.UTC(2026, 3, 1, 0, 0, 0, 0))); // April: a fresh month
    await ledger.charge({ wallet, agentId, amount: 50n, idempotencyKey: 'apr' });
    const budgets = await ledger.budgets(wallet, agentId);
    expect(budgets.monthly.spent).to.equal(50n);
    expect(budgets.weekly.spent).to.equal(100n); // Monday 2026-03-30 to Sunday 2026-04-05
    expect(budgets.weekly.resetsAt.toISOString()).to.equal('2026-04-06T00:00:00.000Z');
    expect(
      (await refusalOf(ledger.charge({ wallet, agentId, amount: 1n, idempotencyKey: 'z' }))).limit,
    ).to.equal('weekly');
  });

  it('check (what a chat asks first): budgets, then the minimum balance, then the amount against available', async () => {
    const { wallet, agentId } = await walletWithAgent(0n);
    const minimum = ledger.settings.minimumBalance;
    const none = await refusalOf(ledger.check(wallet, agentId));
    expect(none.details).to.include({ reason: 'minimum_balance', limit: 'minimum_balance', remaining: '0' });
    expect(none.details?.limitAmount).to.equal(minimum.toString());
    await setOnChain(ledger, wallet, minimum);
    expect((await ledger.check(wallet, agentId)).balance.available).to.equal(minimum);
    expect((await refusalOf(ledger.check(wallet, agentId, minimum + 1n))).limit).to.equal('available');
    await ledger.setBudgets(wallet, agentId, { daily: 0n, weekly: null, monthly: null });
    expect((await refusalOf(ledger.check(wallet, agentId))).details).to.include({
      limit: 'daily',
      remaining: '0',
    });
  });

  it('another wallet cannot charge, check or budget an agent it does not own: 404, nothing recorded', async () => {
    const { agentId } = await walletWithAgent(1000n);
    const stranger = randomWallet();
    await setOnChain(ledger, stranger, 1000n);
    for (const attempt of [
      () => ledger.charge({ wallet: stranger, agentId, amount: 1n, idempotencyKey: 'z' }),
      () => ledger.check(stranger, agentId),
      () => ledger.budgets(stranger, agentId),
      () => ledger.setBudgets(stranger, agentId, { daily: 1n, weekly: null, monthly: null }),
    ]) {
      const err = (await (attempt() as Promise<unknown>).then(
        () => undefined,
        (e: unknown) => e,
      )) as SigilError;
      expect(err.code).to.equal('not_found');
    }
    expect((await ledger.balance(stranger)).unsettledSpend).to.equal(0n);
  });

  it('an on-chain balance read at an older block never replaces a newer one', async () => {
    const wallet = randomWallet();
    expect(await ledger.recordOnChainBalance(wallet, 10n, 100n)).to.equal(true);
    expect(await ledger.recordOnChainBalance(wallet, 5n, 99n)).to.equal(false);
    expect(await ledger.recordOnChainBalance(wallet, 7n, 100n)).to.equal(true);
    expect((await ledger.balance(wallet)).onChainBalance).to.equal(7n);
  });

  it('amounts stay exact past 2^53: sums and balances are integers end to end', async () => {
    const { wallet, agentId } = await walletWithAgent(0n);
    const big = 9_007_199_254_740_993n; // 2^53 + 1, not representable as a double
    await setOnChain(ledger, wallet, big + 2n * 10n ** 15n);
    await ledger.charge({ wallet, agentId, amount: 10n ** 15n, idempotencyKey: 'b1' });
    await ledger.charge({ wallet, agentId, amount: 10n ** 15n, idempotencyKey: 'b2' });
    const balance = await ledger.balance(wallet);
    expect(balance.available).to.equal(big);
    expect((await ledger.budgets(wallet, agentId)).daily.spent).to.equal(2n * 10n ** 15n);
    expect((await ledger.audit(wallet)).ok).to.equal(true);
  });
});
