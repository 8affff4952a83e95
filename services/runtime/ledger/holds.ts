import { randomUUID } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import type { Knex } from 'knex';
import { checksumAddress } from '../../../core/chain/address.ts';
import { SigilError } from '@sigil/plugin-api';
import type { Logger } from '../../../core/log.ts';
import { agentNotFound } from '../agents.ts';
import { MAX_AMOUNT, minus, plus, toAmount } from './amounts.ts';
import { SpendRefused, type SpendPurpose } from './errors.ts';
import { LeasedPass, type JobLeases } from '../../../core/db/leased-pass.ts';
import { SinglePass } from '../../../core/periodic.ts';
import type { Balance } from './balance.ts';
import {
  type OpenHoldRow,
  readBudgets,
  readBudgetsOf,
  refuseOverBudget,
  withoutHeld,
  type Budgets,
} from './budgets.ts';
import { CHARGE_KEY_PREFIX, entryByKey, IDEMPOTENCY_KEY, type LedgerEntry } from './entries.ts';
import type { Ledger } from './ledger.ts';

/**
 * Money a running request may spend, reserved before the work starts. While open it counts in the
 * wallet's `heldSpend` (so in `available`, like a pending withdrawal) and in every current budget
 * window of its agent; settling turns it into a charge of the real cost, releasing gives it back.
 */
export interface Hold {
  id: string;
  wallet: string;
  agentId: string;
  amount: bigint;
  /** The caller's key: the hold's, and the key its settlement charges under. */
  idempotencyKey: string;
  createdAt: Date;
  /** The expiry sweep releases the hold from then on; each extension moves it. */
  expiresAt: Date;
  /**
   * The work's cost recorded on the hold: its real cost when its settlement failed (recordCost), or
   * what it has cost so far while it runs (recordCostSoFar). The expiry sweep charges it.
   */
  settleCost?: bigint;
  /** The work it is for, named by an extension's refusal; not stored (absent on a hold read back). */
  purpose?: SpendPurpose;
}

export interface Settlement {
  /** The charge; undefined when nothing was charged (a cost of 0, or no room left at all). */
  entry: LedgerEntry | undefined;
  charged: bigint;
  /**
   * What the request used beyond what could be charged: only when its cost outgrew its hold and the
   * balance or a budget had no room for the rest. Never charged later (the wallet is never taken
   * below 0 nor past a budget); the caller reports it and the settlement logs it.
   */
  uncharged: bigint;
  /** True when the key had already charged: this is that first charge, not a new one. */
  replayed: boolean;
}

interface HoldRow {
  id: string;
  wallet: string;
  agent_id: string;
  amount: string | number;
  idempotency_key: string;
  created_at: string | number;
  expires_at: string | number;
  settle_cost: string | number | null;
}

const HOLD_COLUMNS = [
  'id',
  'wallet',
  'agent_id',
  'amount',
  'idempotency_key',
  'created_at',
  'expires_at',
  'settle_cost',
];

/** How many times `settleOrRecord` tries to settle before leaving the cost to the expiry sweep. */
const SETTLE_ATTEMPTS = 3;
const SETTLE_RETRY_MS = 200;

/** How many expired holds one sweep step releases (each in its own wallet transaction). */
const EXPIRY_BATCH = 100;

/**
 * Holds on the wallet ledger: `hold` before the work, `extend` before more of it, then `settle` to the
 * real cost or `release`. Each is one transaction under the wallet's lock (Ledger.withWallet:
 * SELECT … FOR UPDATE on PostgreSQL, the write lock on SQLite), so the checks and the reservation they
 * allow are one atomic step however many requests race; a hold whose holder crashed or hung is
 * released by the expiry sweep once `ttlMs` has passed since its last extension. The timed sweep
 * runs on one replica per `sweepIntervalMs` (a LeasedPass, `ledger:expire-holds:<interval>`).
 */
export class Holds {
  private readonly expirySweep: SinglePass<number>;
  private readonly expirySchedule: LeasedPass;

  constructor(
    private readonly deps: JobLeases & {
      ledger: Ledger;
      logger: Logger;
      ttlMs: number;
      sweepIntervalMs: number;
    },
  ) {
    this.expirySweep = new SinglePass(() => this.sweepExpired());
    this.expirySchedule = new LeasedPass({
      leases: deps.leases,
      holder: deps.holder,
      leaseMs: deps.leaseMs,
      name: 'ledger:expire-holds',
      job: () => this.releaseExpired(),
      intervalMs: deps.sweepIntervalMs,
      clock: deps.ledger.clock,
      logger: deps.logger,
      failure: 'ledger: hold expiry sweep failed; retrying at the next',
    });
  }

  private get ledger(): Ledger {
    return this.deps.ledger;
  }

  /**
   * Reserves `amount` for `agentId`'s work. Refused (SpendRefused, 402, nothing recorded) when a
   * budget window has no room for it beside the spend and the other holds, when the available balance
   * is below the ledger's minimum balance, or below `amount`. The same key answers the same open hold;
   * a key that already charged is a 409 (a new piece of work needs a new key). A refusal names
   * `purpose`, the work refused.
   */
  async hold(input: {
    wallet: string;
    agentId: string;
    amount: bigint;
    idempotencyKey: string;
    purpose: SpendPurpose;
  }): Promise<Hold> {
    checkAmount(input.amount);
    if (!IDEMPOTENCY_KEY.test(input.idempotencyKey)) {
      throw new SigilError(
        'invalid_request',
        'An idempotency key is 1 to 200 characters of A-Z a-z 0-9 . _ : -',
      );
    }
    const wallet = checksumAddress(input.wallet);
    return this.ledger.withWallet(wallet, async (trx, balance) => {
      // Under the wallet's lock: the budgets, an earlier charge and an open hold of the key in one read.
      const { budgets, replayId, openHold } = await readBudgets(
        trx,
        this.ledger.clock.now(),
        wallet,
        input.agentId,
        { replayKey: CHARGE_KEY_PREFIX + input.idempotencyKey, holdKey: input.idempotencyKey },
      );
      if (replayId !== undefined) throw alreadyCharged(replayId);
      const open = openHold && openHoldOf(wallet, input.idempotencyKey, openHold);
      if (open) {
        if (open.agentId !== input.agentId)
          throw new SigilError('conflict', 'This idempotency key holds funds for another agent', {
            details: { reason: 'hold_key_reused', agentId: open.agentId },
          });
        return { ...open, purpose: input.purpose };
      }
      this.refuse(budgets, balance, input.amount, input, { minimumBalance: true });
      const now = this.ledger.now();
      const hold: Hold = {
        id: randomUUID(),
        wallet,
        agentId: input.agentId,
        amount: input.amount,
        idempotencyKey: input.idempotencyKey,
        createdAt: new Date(now),
        expiresAt: new Date(now + this.deps.ttlMs),
        purpose: input.purpose,
      };
      const insert = trx('ledger_holds').insert({
        id: hold.id,
        wallet,
        agent_id: hold.agentId,
        amount: hold.amount.toString(),
        idempotency_key: hold.idempotencyKey,
        created_at: now,
        expires_at: hold.expiresAt.getTime(),
      });
      await this.inOne(trx, insert, this.addHeldQuery(trx, wallet, hold.amount));
      return hold;
    });
  }

  /**
   * Raises the hold to `amount` in all (what the work needs before its next step), and moves its
   * expiry. Only the increase is checked, against the budgets and the balance (not the minimum
   * balance: the work has started); a refusal (SpendRefused) leaves the hold as it was. A hold the
   * expiry sweep already released is taken again, checked for its whole amount; one the sweep settled
   * (its recorded cost charged) is not: a 409 `already_charged`, as `hold`.
   */
  async extend(hold: Hold, amount: bigint): Promise<Hold> {
    checkAmount(amount);
    return this.ledger.withWallet(hold.wallet, async (trx, balance) => {
      const current = await this.byKey(trx, hold.wallet, hold.idempotencyKey);
      const increase = amount - (current?.amount ?? 0n);
      const now = this.ledger.now();
      const extended: Hold = {
        ...hold,
        amount: increase > 0n ? amount : (current?.amount ?? amount),
        expiresAt: new Date(now + this.deps.ttlMs),
      };
      if (increase > 0n) {
        const { budgets, replayId } = await readBudgets(
          trx,
          this.ledger.clock.now(),
          hold.wallet,
          hold.agentId,
          current ? {} : { replayKey: CHARGE_KEY_PREFIX + hold.idempotencyKey },
        );
        if (replayId !== undefined) throw alreadyCharged(replayId);
        this.refuse(budgets, balance, increase, hold, { minimumBalance: false });
        await this.addHeld(trx, hold.wallet, increase);
      }
      const row = { amount: extended.amount.toString(), expires_at: extended.expiresAt.getTime() };
      if (current) await trx('ledger_holds').where({ id: current.id }).update(row);
      else
        await trx('ledger_holds').insert({
          ...row,
          id: hold.id,
          wallet: hold.wallet,
          agent_id: hold.agentId,
          idempotency_key: hold.idempotencyKey,
          created_at: hold.createdAt.getTime(),
        });
      return extended;
    });
  }

  /**
   * Moves the hold's expiry to a full TTL from now without changing its amount: one UPDATE, no lock,
   * no checks (nothing more is reserved). The holder calls it before each step of its work, so the TTL
   * only has to outlast one step. A hold the sweep already released is taken again like `extend`.
   */
  async refresh(hold: Hold): Promise<Hold> {
    const expiresAt = new Date(this.ledger.now() + this.deps.ttlMs);
    const moved = await this.ledger
      .db('ledger_holds')
      .where({ wallet: hold.wallet, idempotency_key: hold.idempotencyKey })
      .update({ expires_at: expiresAt.getTime() });
    return moved > 0 ? { ...hold, expiresAt } : this.extend(hold, hold.amount);
  }

  /**
   * `refresh` once `sinceMs` (half the hold's TTL unless told) has passed since its last extension
   * (by its expiry, TTL after it), else the hold as it is (no statement): for a holder that keeps its
   * hold alive often (each part of a long stream), or that took it a moment ago.
   */
  async keep(hold: Hold, sinceMs = this.deps.ttlMs / 2): Promise<Hold> {
    const passed = this.deps.ttlMs - (hold.expiresAt.getTime() - this.ledger.now());
    return passed >= sinceMs ? this.refresh(hold) : hold;
  }

  /** How long a hold stays without a refresh or an extension (ledger.holdTtlSeconds). */
  get ttlMs(): number {
    return this.deps.ttlMs;
  }

  /**
   * Ends the hold and charges `cost`, the work's real cost, under the hold's key, in one transaction.
   * Within the hold this always succeeds. Past it (the estimate fell short), the charge is capped at
   * what the available balance and every budget window allow once the hold is given back, never
   * below 0; the rest is `uncharged`. Settling again answers the first charge (`replayed`).
   */
  async settle(hold: Hold, cost: bigint): Promise<Settlement> {
    if (cost < 0n || cost > MAX_AMOUNT) throw new SigilError('internal', `A cost out of range: ${cost}`);
    const settlement = await this.ledger.withWallet(hold.wallet, (trx, balance) =>
      this.settleIn(trx, balance, hold, cost),
    );
    this.warnUncharged(hold, cost, settlement);
    return settlement;
  }

  /**
   * When `settle` failed (the database was unreachable, a lock timed out): records the work's real
   * cost on the hold and makes it due, so the next expiry sweep settles it to that cost instead of
   * releasing it. False when the hold is gone (settled meanwhile, or already swept).
   */
  async recordCost(hold: Hold, cost: bigint): Promise<boolean> {
    if (cost < 0n || cost > MAX_AMOUNT) throw new SigilError('internal', `A cost out of range: ${cost}`);
    const moved = await this.ledger
      .db('ledger_holds')
      .where({ wallet: hold.wallet, idempotency_key: hold.idempotencyKey })
      .update({ settle_cost: cost.toString(), expires_at: this.ledger.now() });
    return moved > 0;
  }

  /**
   * For work of several steps under one hold: records what the work has cost so far on the hold after
   * each step and moves its expiry like `refresh` (one UPDATE, no lock), so that if the holder dies
   * before it settles, the expiry sweep charges that cost once the hold expires instead of releasing it
   * (the holder's own `settle` replaces it). Unlike `recordCost` the hold stays open. The hold with its
   * new expiry; undefined when it is gone (settled, or the sweep ended it).
   */
  async recordCostSoFar(hold: Hold, cost: bigint): Promise<Hold | undefined> {
    if (cost < 0n || cost > MAX_AMOUNT) throw new SigilError('internal', `A cost out of range: ${cost}`);
    const expiresAt = new Date(this.ledger.now() + this.deps.ttlMs);
    const moved = await this.ledger
      .db('ledger_holds')
      .where({ wallet: hold.wallet, idempotency_key: hold.idempotencyKey })
      .update({ settle_cost: cost.toString(), expires_at: expiresAt.getTime() });
    return moved > 0 ? { ...hold, expiresAt, settleCost: cost } : undefined;
  }

  /**
   * `recordCostSoFar` for a holder whose hold may have expired while a step ran longer than its TTL:
   * a hold the sweep released is taken again first (like `extend`), one it charged refuses (409
   * `already_charged`: the work ends). The hold as recorded.
   */
  async recordSpent(hold: Hold, cost: bigint): Promise<Hold> {
    const recorded = await this.recordCostSoFar(hold, cost);
    if (recorded) return recorded;
    await this.extend(hold, hold.amount);
    return (await this.recordCostSoFar(hold, cost)) ?? hold;
  }

  /**
   * `settle`, tried SETTLE_ATTEMPTS times (a lock timeout, a dropped connection). When every attempt
   * failed, the cost is recorded on the hold (`recordCost`) and the expiry sweep charges it: work is
   * never served free for a database fault. `context` goes into the log lines (who settles what).
   */
  async settleOrRecord(
    hold: Hold,
    cost: bigint,
    context: Record<string, unknown>,
  ): Promise<{ settlement: Settlement } | { failure: unknown; recorded: boolean }> {
    const { logger } = this.deps;
    const logged = { ...context, key: hold.idempotencyKey, amount: cost.toString() };
    let failure: unknown;
    for (let attempt = 1; attempt <= SETTLE_ATTEMPTS; attempt++) {
      try {
        return { settlement: await this.settle(hold, cost) };
      } catch (err) {
        failure = err;
        if (attempt === SETTLE_ATTEMPTS) break;
        logger.warn({ err, attempt, ...logged }, 'ledger: a settlement failed; trying again');
        await delay(SETTLE_RETRY_MS * attempt);
      }
    }
    const recorded = await this.recordCost(hold, cost).catch((err: unknown) => {
      logger.error({ err, ...logged }, 'ledger: recording the cost of a failed settlement failed too');
      return false;
    });
    logger.error(
      { err: failure, recorded, ...logged },
      recorded
        ? 'ledger: a settlement failed; the hold keeps its cost and the expiry sweep charges it'
        : 'ledger: a settlement failed and its cost is not on the hold: the expiry sweep releases it',
    );
    return { failure, recorded };
  }

  /** Ends the hold and charges `cost` within the wallet's transaction (see `settle`). */
  private async settleIn(
    trx: Knex.Transaction,
    balance: Balance,
    hold: Hold,
    cost: bigint,
  ): Promise<Settlement> {
    const key = CHARGE_KEY_PREFIX + hold.idempotencyKey;
    // Under the wallet's lock: the open hold, an earlier charge of the key and the budgets in one read.
    const read = await readBudgetsOf(trx, this.ledger.clock.now(), hold.wallet, hold.agentId, {
      replayKey: key,
      holdKey: hold.idempotencyKey,
    });
    if (!read) {
      // No such agent of the wallet (deleted meanwhile): the hold ends and an earlier charge answers.
      await this.drop(trx, hold.wallet, hold.idempotencyKey);
      const first = await entryByKey(trx, hold.wallet, key);
      if (first) return replayedBy(first);
      if (cost === 0n) return NOTHING_CHARGED;
      throw agentNotFound(hold.agentId);
    }
    const open = read.openHold && openHoldOf(hold.wallet, hold.idempotencyKey, read.openHold);
    const released = open?.amount ?? 0n;
    const first = read.replayId === undefined ? undefined : await entryByKey(trx, hold.wallet, key);
    if (first || cost === 0n) {
      if (open) await this.releaseHeld(trx, open);
      return first ? replayedBy(first) : NOTHING_CHARGED;
    }
    // The budgets as they are once this hold is gone (the read counted it among the agent's holds).
    const budgets =
      open && open.agentId === hold.agentId ? withoutHeld(read.budgets, released) : read.budgets;
    // What the wallet can spend once this hold is gone: a shortfall eats into the released amount.
    let room = balance.available - balance.shortfall + released;
    for (const state of Object.values(budgets))
      if (state.remaining !== null && state.remaining < room) room = state.remaining;
    const charged = cost < room ? cost : room > 0n ? room : 0n;
    if (charged === 0n) {
      if (open) await this.releaseHeld(trx, open);
      return { ...NOTHING_CHARGED, uncharged: cost };
    }
    const entry = await this.ledger.append(
      trx,
      { wallet: hold.wallet, kind: 'charge', amount: charged, idempotencyKey: key, agentId: hold.agentId },
      { knownNew: true, ...(open ? { release: open } : {}) },
    );
    return { entry, charged, uncharged: cost - charged, replayed: false };
  }

  private warnUncharged(hold: Hold, cost: bigint, settlement: Settlement): void {
    if (settlement.uncharged > 0n) {
      this.deps.logger.warn(
        {
          wallet: hold.wallet,
          agentId: hold.agentId,
          key: hold.idempotencyKey,
          hold: hold.amount.toString(),
          cost: cost.toString(),
          uncharged: settlement.uncharged.toString(),
        },
        'ledger: a cost outgrew its hold and the balance or budget could not cover the rest',
      );
    }
  }

  /** Gives the hold back without charging (the work failed before it used anything). */
  async release(hold: Hold): Promise<boolean> {
    return this.ledger.withWallet(
      hold.wallet,
      async (trx) => (await this.drop(trx, hold.wallet, hold.idempotencyKey)) > 0n,
    );
  }

  /** The wallet's open hold under `idempotencyKey`, if any. */
  async get(wallet: string, idempotencyKey: string): Promise<Hold | undefined> {
    return this.byKey(this.ledger.db, checksumAddress(wallet), idempotencyKey);
  }

  /**
   * Ends every hold whose expiry has passed (by the ledger's clock): settled to its recorded cost when
   * it has one (its holder's settlement failed, or its holder died after recording its cost so far),
   * released otherwise; resolves with how many.
   */
  releaseExpired(): Promise<number> {
    return this.expirySweep.run();
  }

  /** Ends expired holds if this interval's sweep is due and no replica has taken it: true when it ran here. */
  releaseExpiredDue(): Promise<boolean> {
    return this.expirySchedule.runDue();
  }

  start(): void {
    this.expirySchedule.start();
  }

  async stop(): Promise<void> {
    await this.expirySchedule.stop();
    await this.expirySweep.settled();
  }

  private async sweepExpired(): Promise<number> {
    const ended = { released: 0, settled: 0 };
    for (;;) {
      const now = this.ledger.now();
      const due = (await this.ledger
        .db('ledger_holds')
        .where('expires_at', '<=', now)
        .orderBy('expires_at')
        .limit(EXPIRY_BATCH)
        .select('wallet', 'idempotency_key')) as { wallet: string; idempotency_key: string }[];
      let failed = false;
      for (const { wallet, idempotency_key: key } of due) {
        try {
          const outcome = await this.endExpired(wallet, key, now);
          if (outcome) ended[outcome]++;
        } catch (err) {
          // One hold that cannot be settled (its charge keeps failing) does not keep the others held.
          failed = true;
          this.deps.logger.warn(
            { err, wallet, key },
            'ledger: an expired hold could not be ended; retrying at the next sweep',
          );
        }
      }
      // After a failure the same holds would come first again: the next sweep tries them.
      if (failed || due.length < EXPIRY_BATCH) break;
    }
    if (ended.released > 0)
      this.deps.logger.warn(
        { holds: ended.released },
        'ledger: released expired holds (their holder never settled)',
      );
    if (ended.settled > 0)
      this.deps.logger.warn(
        { holds: ended.settled },
        'ledger: settled holds whose holder could not (their recorded cost)',
      );
    return ended.released + ended.settled;
  }

  /** Settles the hold to its recorded cost, or releases it; checked again under the wallet's lock. */
  private endExpired(wallet: string, key: string, now: number): Promise<'released' | 'settled' | undefined> {
    return this.ledger.withWallet(wallet, async (trx, balance) => {
      const open = await this.byKey(trx, wallet, key);
      // An extension or a refresh may have moved the expiry meanwhile.
      if (!open || open.expiresAt.getTime() > now) return undefined;
      if (open.settleCost === undefined) {
        await this.drop(trx, wallet, key);
        return 'released';
      }
      const settlement = await this.settleIn(trx, balance, open, open.settleCost);
      this.warnUncharged(open, open.settleCost, settlement);
      return 'settled';
    });
  }

  /** Deletes the hold and lowers held spend; returns its amount. */
  private async drop(trx: Knex.Transaction, wallet: string, key: string): Promise<bigint> {
    const open = await this.byKey(trx, wallet, key);
    if (!open) return 0n;
    await this.releaseHeld(trx, open);
    return open.amount;
  }

  /** Deletes an open hold read under the wallet's lock and lowers held spend. */
  private async releaseHeld(trx: Knex.Transaction, open: Hold): Promise<void> {
    await this.inOne(
      trx,
      trx('ledger_holds').where({ id: open.id }).delete(),
      trx('ledger_wallets')
        .where({ wallet: open.wallet })
        .update({ held_spend: minus(trx, 'held_spend', open.amount), updated_at: this.ledger.now() }),
    );
  }

  private addHeldQuery(trx: Knex.Transaction, wallet: string, amount: bigint): Knex.QueryBuilder {
    return trx('ledger_wallets')
      .where({ wallet })
      .update({ held_spend: plus(trx, 'held_spend', amount), updated_at: this.ledger.now() });
  }

  private async addHeld(trx: Knex.Transaction, wallet: string, amount: bigint): Promise<void> {
    await this.addHeldQuery(trx, wallet, amount);
  }

  /**
   * Two writes to different tables: on PostgreSQL one statement (data-modifying CTEs, as Ledger.append),
   * on SQLite one after the other.
   */
  private async inOne(
    trx: Knex.Transaction,
    first: Knex.QueryBuilder,
    second: Knex.QueryBuilder,
  ): Promise<void> {
    if (this.ledger.postgres) {
      await trx.with('first_write', first).with('second_write', second).select(trx.raw('1 as done'));
      return;
    }
    await first;
    await second;
  }

  private async byKey(db: Knex, wallet: string, key: string): Promise<Hold | undefined> {
    const row = (await db('ledger_holds')
      .where({ wallet, idempotency_key: key })
      .first(HOLD_COLUMNS.map((column) => db.raw('cast(?? as text) as ??', [column, column])))) as
      HoldRow | undefined;
    return row ? holdOf(row) : undefined;
  }

  /** Budgets first, then (when starting) the minimum balance, then the amount against available. */
  private refuse(
    budgets: Budgets,
    balance: Balance,
    amount: bigint,
    spend: { agentId: string; purpose?: SpendPurpose | undefined },
    options: { minimumBalance: boolean },
  ): void {
    const { agentId, purpose } = spend;
    refuseOverBudget(budgets, amount, { agentId, purpose });
    const facts = {
      requested: amount,
      remaining: balance.available,
      agentId,
      ...(purpose === undefined ? {} : { purpose }),
    };
    const minimum = this.ledger.settings.minimumBalance;
    if (options.minimumBalance && balance.available < minimum)
      throw new SpendRefused('minimum_balance', { ...facts, limit: minimum });
    if (amount > balance.available) throw new SpendRefused('available', facts);
  }
}

const alreadyCharged = (entryId: string): SigilError =>
  new SigilError('conflict', 'This idempotency key has already charged', {
    hint: 'Use a new idempotency key for new work',
    details: { reason: 'already_charged', entryId },
  });

function checkAmount(amount: bigint): void {
  if (amount <= 0n || amount > MAX_AMOUNT) {
    throw new SigilError('invalid_request', `A hold must be between 1 and ${MAX_AMOUNT} base units`);
  }
}

const NOTHING_CHARGED: Settlement = { entry: undefined, charged: 0n, uncharged: 0n, replayed: false };
const replayedBy = (first: LedgerEntry): Settlement => ({
  entry: first,
  charged: first.amount,
  uncharged: 0n,
  replayed: true,
});

/** The open hold `readBudgets` read under its key. */
const openHoldOf = (wallet: string, idempotencyKey: string, row: OpenHoldRow): Hold =>
  holdOf({ ...row, wallet, idempotency_key: idempotencyKey } as HoldRow);

function holdOf(row: HoldRow): Hold {
  return {
    id: row.id,
    wallet: row.wallet,
    agentId: row.agent_id,
    amount: toAmount(row.amount),
    idempotencyKey: row.idempotency_key,
    createdAt: new Date(Number(row.created_at)),
    expiresAt: new Date(Number(row.expires_at)),
    ...(row.settle_cost === null ? {} : { settleCost: toAmount(row.settle_cost) }),
  };
}
