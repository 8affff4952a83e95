import { expect } from 'chai';
import { isSigilError, type SigilError } from '@sigil/plugin-api';
import { SpendRefused, type SpendPurpose } from '../../../../services/runtime/ledger/errors.ts';
import type { Holds } from '../../../../services/runtime/ledger/holds.ts';
import type { Ledger } from '../../../../services/runtime/ledger/ledger.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import {
  MIDWEEK,
  openLedgerWorld,
  randomWallet,
  refuseCharges,
  setOnChain,
  type LedgerWorld,
} from './support.ts';

const TTL_MS = 600_000;

async function refusalOf(attempt: Promise<unknown>): Promise<SigilError> {
  try {
    await attempt;
  } catch (err) {
    if (isSigilError(err)) return err;
    throw err;
  }
  throw new Error('expected a refusal, but it was allowed');
}

describeEachDatabase('ledger: holds (reserve before work, settle after)', (database) => {
  let world: LedgerWorld;
  let ledger: Ledger;
  let holds: Holds;
  before(async () => {
    world = await openLedgerWorld(database, { config: { ledger: { minimumBalance: '0' } as never } });
    ledger = world.ledger;
    holds = world.service.holds;
  });
  after(() => world?.close());
  beforeEach(() => world.clock.set(new Date(MIDWEEK)));

  async function walletWithAgent(onChain: bigint, daily?: bigint) {
    const wallet = randomWallet();
    const agentId = (await world.service.agents.create(wallet, { name: 'a', model: 'm' })).id;
    if (onChain > 0n) await setOnChain(ledger, wallet, onChain);
    if (daily !== undefined) await ledger.setBudgets(wallet, agentId, { daily, weekly: null, monthly: null });
    return { wallet, agentId };
  }

  it('a hold counts in available and in the budget windows until it settles to the real cost', async () => {
    const { wallet, agentId } = await walletWithAgent(1000n, 800n);
    const hold = await holds.hold({ wallet, agentId, amount: 300n, idempotencyKey: 'h1', purpose: 'chat' });
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 300n, available: 700n });
    expect((await ledger.budgets(wallet, agentId)).daily).to.include({
      spent: 0n,
      held: 300n,
      remaining: 500n,
    });
    // A direct charge cannot take the held money either.
    expect(
      await refusalOf(ledger.charge({ wallet, agentId, amount: 501n, idempotencyKey: 'c' })),
    ).to.be.instanceOf(SpendRefused);
    const settled = await holds.settle(hold, 120n);
    expect(settled).to.include({ charged: 120n, uncharged: 0n, replayed: false });
    expect(settled.entry).to.include({ kind: 'charge', amount: 120n, idempotencyKey: 'h1', agentId });
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 0n, unsettledSpend: 120n, available: 880n });
    expect((await ledger.budgets(wallet, agentId)).daily).to.include({
      spent: 120n,
      held: 0n,
      remaining: 680n,
    });
    // Settling again answers the first charge; the key cannot hold again.
    expect(await holds.settle(hold, 120n)).to.include({ charged: 120n, replayed: true });
    const again = await refusalOf(
      holds.hold({ wallet, agentId, amount: 1n, idempotencyKey: 'h1', purpose: 'chat' }),
    );
    expect(again.code).to.equal('conflict');
    expect(again.details).to.include({ reason: 'already_charged' });
    expect((await ledger.audit(wallet)).mismatches).to.deep.equal([]);
  });

  it('a refused hold records nothing; the same key answers the same open hold', async () => {
    const { wallet, agentId } = await walletWithAgent(1000n, 500n);
    const budget = await refusalOf(
      holds.hold({ wallet, agentId, amount: 501n, idempotencyKey: 'big', purpose: 'chat' }),
    );
    expect((budget as SpendRefused).limit).to.equal('daily');
    const balance = await refusalOf(
      holds.hold({ wallet, agentId, amount: 1001n, idempotencyKey: 'big', purpose: 'chat' }),
    );
    expect((balance as SpendRefused).limit).to.equal('daily');
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 0n, available: 1000n });
    const first = await holds.hold({ wallet, agentId, amount: 400n, idempotencyKey: 'k', purpose: 'chat' });
    const replay = await holds.hold({ wallet, agentId, amount: 400n, idempotencyKey: 'k', purpose: 'chat' });
    expect(replay.id).to.equal(first.id);
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 400n });
    const other = await refusalOf(
      holds.hold({ wallet, agentId, amount: 200n, idempotencyKey: 'k2', purpose: 'chat' }),
    );
    expect((other as SpendRefused).limit).to.equal('daily');
    expect(await holds.release(first)).to.equal(true);
    expect(await holds.release(first)).to.equal(false);
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 0n, unsettledSpend: 0n, available: 1000n });
    expect((await ledger.audit(wallet)).mismatches).to.deep.equal([]);
  });

  it('200 concurrent holds of 10 on a balance of 500: exactly 50 are taken, available never below 0', async function () {
    this.timeout(120_000);
    const { wallet, agentId } = await walletWithAgent(500n);
    const results = await Promise.allSettled(
      Array.from({ length: 200 }, (_, i) =>
        holds.hold({ wallet, agentId, amount: 10n, idempotencyKey: `c${i}`, purpose: 'chat' }),
      ),
    );
    const taken = results.filter((r) => r.status === 'fulfilled');
    expect(taken).to.have.length(50);
    for (const r of results)
      if (r.status === 'rejected') expect((r.reason as SpendRefused).limit).to.equal('available');
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 500n, available: 0n });
    expect((await ledger.audit(wallet)).mismatches).to.deep.equal([]);
  });

  it('a cost past the hold is charged up to what available and the budgets allow, never below 0', async () => {
    const { wallet, agentId } = await walletWithAgent(1000n, 700n);
    const mine = await holds.hold({ wallet, agentId, amount: 100n, idempotencyKey: 'mine', purpose: 'chat' });
    const others = await holds.hold({
      wallet,
      agentId,
      amount: 500n,
      idempotencyKey: 'others',
      purpose: 'chat',
    });
    // The daily budget has 700 − 600 held = 100 left beside this hold: 200 can be charged of 5,000.
    const settled = await holds.settle(mine, 5000n);
    expect(settled).to.include({ charged: 200n, uncharged: 4800n });
    expect(await ledger.balance(wallet)).to.include({
      heldSpend: 500n,
      unsettledSpend: 200n,
      available: 300n,
    });
    await holds.settle(others, 0n);
    const poor = await walletWithAgent(50n);
    const hold = await holds.hold({ ...poor, amount: 50n, idempotencyKey: 'p', purpose: 'chat' });
    expect(await holds.settle(hold, 80n)).to.include({ charged: 50n, uncharged: 30n });
    expect(await ledger.balance(poor.wallet)).to.include({ available: 0n, heldSpend: 0n });
    expect((await ledger.audit()).mismatches).to.deep.equal([]);
  });

  it('a refusal names the work refused, from the purpose its hold was asked for', async () => {
    const { wallet, agentId } = await walletWithAgent(1000n, 500n);
    const work = { chat: 'a chat', canvas_run: 'a canvas run', self_improvement: 'a self-improvement run' };
    for (const [purpose, named] of Object.entries(work) as [SpendPurpose, string][]) {
      const budget = await refusalOf(
        holds.hold({ wallet, agentId, amount: 501n, idempotencyKey: `b-${purpose}`, purpose }),
      );
      expect(budget.details).to.include({ reason: 'budget_exceeded', purpose });
      expect(budget.message).to.include(`; ${named} needs 501 base units`);
    }
    await ledger.setBudgets(wallet, agentId, { daily: null, weekly: null, monthly: null });
    const hold = await holds.hold({
      wallet,
      agentId,
      amount: 100n,
      idempotencyKey: 'c',
      purpose: 'canvas_run',
    });
    const over = await refusalOf(holds.extend(hold, 1101n));
    expect(over.details).to.include({ reason: 'insufficient_funds', purpose: 'canvas_run' });
    expect(over.message).to.match(
      /^Refused: a canvas run needs 1001 base units \(.*\) but only 900 base units/,
    );
    // A bare charge is made for no named work.
    const charge = await refusalOf(ledger.charge({ wallet, agentId, amount: 901n, idempotencyKey: 'd' }));
    expect(charge.details).to.not.have.property('purpose');
    expect(charge.message).to.match(/^Refused: this needs 901 base units/);
  });

  it('an extension reserves only the increase, is refused without room, and moves the expiry', async () => {
    const { wallet, agentId } = await walletWithAgent(1000n);
    let hold = await holds.hold({ wallet, agentId, amount: 100n, idempotencyKey: 'x', purpose: 'chat' });
    world.clock.advance(TTL_MS - 1000);
    hold = await holds.extend(hold, 600n);
    expect(hold.amount).to.equal(600n);
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 600n, available: 400n });
    const refused = await refusalOf(holds.extend(hold, 1001n));
    expect((refused as SpendRefused).limit).to.equal('available');
    expect(refused.details).to.include({ purpose: 'chat' });
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 600n });
    // Past the first expiry, but within the extended one: the sweep keeps it.
    world.clock.advance(2000);
    await holds.releaseExpired();
    expect((await holds.get(wallet, 'x'))?.amount).to.equal(600n);
    expect((await holds.settle(hold, 550n)).charged).to.equal(550n);
  });

  it('the expiry sweep releases the holds of a crashed holder, and a late settlement still charges once', async () => {
    const { wallet, agentId } = await walletWithAgent(1000n);
    const crashed = await holds.hold({
      wallet,
      agentId,
      amount: 300n,
      idempotencyKey: 'crash',
      purpose: 'chat',
    });
    const late = await holds.hold({ wallet, agentId, amount: 200n, idempotencyKey: 'late', purpose: 'chat' });
    world.clock.advance(TTL_MS);
    expect(await holds.releaseExpired()).to.be.at.least(2);
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 0n, available: 1000n });
    expect(await holds.get(wallet, crashed.idempotencyKey)).to.equal(undefined);
    // The holder was only slow: what it used is still charged, once, from the balance.
    expect(await holds.settle(late, 150n)).to.include({ charged: 150n, uncharged: 0n });
    expect(await holds.settle(late, 150n)).to.include({ charged: 150n, replayed: true });
    expect(await ledger.balance(wallet)).to.include({ unsettledSpend: 150n, available: 850n });
    expect((await ledger.audit(wallet)).mismatches).to.deep.equal([]);
  });

  it('a refresh moves only the expiry: the sweep keeps a refreshed hold, and a swept one is taken again', async () => {
    const { wallet, agentId } = await walletWithAgent(1000n);
    let hold = await holds.hold({ wallet, agentId, amount: 100n, idempotencyKey: 'r', purpose: 'chat' });
    world.clock.advance(TTL_MS - 1000);
    hold = await holds.refresh(hold);
    world.clock.advance(2000);
    expect(await holds.releaseExpired()).to.equal(0);
    expect(await holds.get(wallet, 'r')).to.include({ amount: 100n });
    world.clock.advance(TTL_MS);
    expect(await holds.releaseExpired()).to.equal(1);
    hold = await holds.refresh(hold);
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 100n, available: 900n });
    expect((await holds.settle(hold, 40n)).charged).to.equal(40n);
  });

  it('keep refreshes a hold only once the time asked has passed since its last refresh (half the TTL unless told)', async () => {
    const { wallet, agentId } = await walletWithAgent(1000n);
    const taken = await holds.hold({ wallet, agentId, amount: 100n, idempotencyKey: 'k', purpose: 'chat' });
    const stored = async () => (await holds.get(wallet, 'k'))?.expiresAt.getTime();
    world.clock.advance(249);
    expect(await holds.keep(taken, 250)).to.equal(taken);
    expect(await stored()).to.equal(taken.expiresAt.getTime());
    world.clock.advance(1);
    const refreshed = await holds.keep(taken, 250);
    expect(refreshed.expiresAt.getTime()).to.equal(taken.expiresAt.getTime() + 250);
    expect(await stored()).to.equal(refreshed.expiresAt.getTime());
    world.clock.advance(TTL_MS / 2 - 1);
    expect(await holds.keep(refreshed)).to.equal(refreshed);
    world.clock.advance(1);
    const kept = await holds.keep(refreshed);
    expect(kept.expiresAt.getTime()).to.equal(refreshed.expiresAt.getTime() + TTL_MS / 2);
    // Nothing left open for the other tests' sweeps.
    await holds.release(kept);
  });

  it('the sweep charges a recorded cost instead of releasing; one hold it cannot settle keeps no other', async () => {
    const failing = await walletWithAgent(1000n);
    const other = await walletWithAgent(1000n);
    const owed = await holds.hold({ ...failing, amount: 300n, idempotencyKey: 'owed', purpose: 'chat' });
    await holds.hold({ ...other, amount: 200n, idempotencyKey: 'crashed', purpose: 'chat' });
    expect(await holds.recordCost(owed, 120n)).to.equal(true);
    const fault = await refuseCharges(world.kernel.db, failing.wallet);
    try {
      world.clock.advance(TTL_MS);
      expect(await holds.releaseExpired()).to.equal(1);
      expect(await ledger.balance(other.wallet)).to.include({ heldSpend: 0n });
      expect(await ledger.balance(failing.wallet)).to.include({ heldSpend: 300n, unsettledSpend: 0n });
    } finally {
      await fault.heal();
    }
    expect(await holds.releaseExpired()).to.equal(1);
    expect(await ledger.balance(failing.wallet)).to.include({ heldSpend: 0n, unsettledSpend: 120n });
    expect(await holds.settle(owed, 120n)).to.include({ charged: 120n, replayed: true });
    expect((await ledger.audit()).mismatches).to.deep.equal([]);
  });

  it('a cost so far keeps the hold open and alive; once its holder died the sweep charges the last one recorded, once', async () => {
    const { wallet, agentId } = await walletWithAgent(1000n);
    let hold = await holds.hold({ wallet, agentId, amount: 300n, idempotencyKey: 'steps', purpose: 'chat' });
    world.clock.advance(TTL_MS - 1000);
    hold = (await holds.recordCostSoFar(hold, 40n)) as typeof hold;
    expect(hold).to.include({ settleCost: 40n });
    // Recorded like a refresh: past the first expiry the sweep keeps it, and it is still open.
    world.clock.advance(2000);
    expect(await holds.releaseExpired()).to.equal(0);
    expect(await holds.get(wallet, 'steps')).to.include({ amount: 300n, settleCost: 40n });
    hold = (await holds.recordCostSoFar(hold, 90n)) as typeof hold;
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 300n, unsettledSpend: 0n });
    // The holder dies: nothing refreshes it, and the sweep charges the last cost it recorded.
    world.clock.advance(TTL_MS);
    expect(await holds.releaseExpired()).to.equal(1);
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 0n, unsettledSpend: 90n, available: 910n });
    expect(await holds.releaseExpired()).to.equal(0);
    expect(await holds.recordCostSoFar(hold, 120n)).to.equal(undefined);
    // A late holder cannot take it again nor charge twice: its settlement answers the sweep's charge.
    const again = await refusalOf(holds.extend(hold, 400n));
    expect(again.details).to.include({ reason: 'already_charged' });
    expect(await holds.settle(hold, 120n)).to.include({ charged: 90n, replayed: true });
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 0n, unsettledSpend: 90n });
    expect((await ledger.audit(wallet)).mismatches).to.deep.equal([]);
  });

  it('a settlement that keeps failing is tried again, then left on the hold for the sweep to charge', async function () {
    this.timeout(30_000);
    const { wallet, agentId } = await walletWithAgent(1000n);
    const hold = await holds.hold({
      wallet,
      agentId,
      amount: 300n,
      idempotencyKey: 'retried',
      purpose: 'chat',
    });
    const fault = await refuseCharges(world.kernel.db, wallet);
    let settled: Awaited<ReturnType<Holds['settleOrRecord']>>;
    try {
      settled = await holds.settleOrRecord(hold, 70n, { test: 'retried' });
    } finally {
      await fault.heal();
    }
    expect(settled).to.include({ recorded: true });
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 300n, unsettledSpend: 0n });
    expect(await holds.releaseExpired()).to.equal(1);
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 0n, unsettledSpend: 70n });
    const healthy = await holds.hold({
      wallet,
      agentId,
      amount: 100n,
      idempotencyKey: 'healthy',
      purpose: 'chat',
    });
    const ok = await holds.settleOrRecord(healthy, 30n, { test: 'healthy' });
    expect('settlement' in ok && ok.settlement).to.include({ charged: 30n, replayed: false });
    expect((await ledger.audit(wallet)).mismatches).to.deep.equal([]);
  });

  it('a hold and its settlement each read once under the wallet lock (budgets, key, open hold), writing in one statement on PostgreSQL', async () => {
    const { wallet, agentId } = await walletWithAgent(1000n, 800n);
    const statements: string[] = [];
    const record = (query: { sql: string }) => statements.push(query.sql);
    const counted = async <T>(work: () => Promise<T>): Promise<{ result: T; count: number }> => {
      statements.length = 0;
      world.kernel.db.on('query', record);
      try {
        return { result: await work(), count: statements.length };
      } finally {
        world.kernel.db.off('query', record);
      }
    };
    const postgres = ledger.postgres;
    const other = await holds.hold({
      wallet,
      agentId,
      amount: 400n,
      idempotencyKey: 'other',
      purpose: 'chat',
    });
    // BEGIN, lock (SQLite: the write that locks answers the balance), one read, the writes, COMMIT.
    const held = await counted(() =>
      holds.hold({ wallet, agentId, amount: 300n, idempotencyKey: 's1', purpose: 'chat' }),
    );
    expect(held.count).to.equal(postgres ? 5 : 6);
    // The settled hold's 300 no longer counts against the daily budget: 800 − 400 still held = 400 room.
    const settled = await counted(() => holds.settle(held.result, 450n));
    expect(settled.count).to.equal(postgres ? 5 : 8);
    expect(settled.result).to.include({ charged: 400n, uncharged: 50n, replayed: false });
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 400n, available: 200n });
    expect(await holds.get(wallet, 's1')).to.equal(undefined);
    // Settled again: the first charge answers, and the other hold stays.
    expect(await holds.settle(held.result, 450n)).to.include({ charged: 400n, replayed: true });
    expect((await ledger.budgets(wallet, agentId)).daily).to.include({
      spent: 400n,
      held: 400n,
      remaining: 0n,
    });
    await holds.release(other);
    expect(await ledger.balance(wallet)).to.include({ heldSpend: 0n, available: 600n });
    expect((await ledger.audit(wallet)).ok).to.equal(true);
  });

  it('another wallet cannot hold on an agent it does not own: 404, nothing held', async () => {
    const { agentId } = await walletWithAgent(1000n);
    const stranger = randomWallet();
    await setOnChain(ledger, stranger, 1000n);
    const refused = await refusalOf(
      holds.hold({ wallet: stranger, agentId, amount: 1n, idempotencyKey: 's', purpose: 'chat' }),
    );
    expect(refused.code).to.equal('not_found');
    expect(await ledger.balance(stranger)).to.include({ heldSpend: 0n });
  });
});
