import type { Knex } from 'knex';
import { checksumAddress } from '../../../core/chain/address.ts';
import type { Clock } from '../../../core/clock.ts';
import { dialectOf, type Database } from '../../../core/db/database.ts';
import { SigilError } from '@sigil/plugin-api';
import type { Logger } from '../../../core/log.ts';
import { asText, MAX_AMOUNT } from './amounts.ts';
import { auditLedger, type LedgerAudit } from './audit.ts';
import {
  balanceOf,
  ENTRY_EFFECTS,
  WALLET_MONEY,
  type Balance,
  type EntryKind,
  type TotalColumn,
  type WalletRow,
} from './balance.ts';
import { readBudgets, writeBudgetLimits, type BudgetLimits, type Budgets } from './budgets.ts';
import { ChargeBatcher } from './charge-batch.ts';
import { chargeInput, checkSpend, type Charge, type ChargeInput } from './charges.ts';
import { entryOf, historyPage, type LedgerEntry } from './entries.ts';
import { utcDay } from './windows.ts';

export { ENTRY_KINDS, type Balance, type EntryKind } from './balance.ts';

export interface LedgerSettings {
  /** Available balance a hold needs to start (a chat's, a canvas run's, self-improvement's). */
  minimumBalance: bigint;
}

/**
 * The wallet ledger: append-only entries in integer base units, per-agent budgets in calendar UTC
 * windows, and the balance rule. Every change to a wallet's money runs in one transaction that first
 * locks the wallet's row (PostgreSQL: SELECT … FOR UPDATE; SQLite: a write that takes the database's
 * write lock, and knex's single connection serialises this process's transactions), so checks and the
 * entry they allow are one atomic step however many requests race. Here: the lock, appending entries
 * and the balances; charges and the spend check are in charges.ts, budgets in budgets.ts, the reading
 * of entries in entries.ts.
 */
export class Ledger {
  readonly settings: LedgerSettings;
  /** PostgreSQL (row locks, data-modifying CTEs) rather than SQLite (one writer). */
  readonly postgres: boolean;
  private readonly charges = new ChargeBatcher(this);

  constructor(
    private readonly deps: { db: Database; clock: Clock; logger: Logger; settings: LedgerSettings },
  ) {
    this.settings = deps.settings;
    this.postgres = dialectOf(deps.db) === 'postgres';
  }

  get db(): Database {
    return this.deps.db;
  }

  get clock(): Clock {
    return this.deps.clock;
  }

  get logger(): Logger {
    return this.deps.logger;
  }

  now(): number {
    return this.deps.clock.now().getTime();
  }

  async balance(wallet: string): Promise<Balance> {
    const address = checksumAddress(wallet);
    const row = (await this.deps
      .db('ledger_wallets')
      .where({ wallet: address })
      .first(WALLET_MONEY.map((column) => asText(this.deps.db, column)))) as WalletRow | undefined;
    return balanceOf(address, row);
  }

  /**
   * Runs `work` holding the wallet's lock, in one transaction (the wallet's row is created first when
   * it has none). Everything that changes a wallet's money goes through here.
   */
  async withWallet<T>(
    wallet: string,
    work: (trx: Knex.Transaction, balance: Balance) => Promise<T>,
  ): Promise<T> {
    const address = checksumAddress(wallet);
    return this.deps.db.transaction(async (trx) => work(trx, await this.lock(trx, address)));
  }

  private async lock(trx: Knex.Transaction, wallet: string): Promise<Balance> {
    const locked = (await this.lockWallets(trx, [wallet])).get(wallet);
    if (locked) return locked;
    const now = this.now();
    await trx('ledger_wallets')
      .insert({ wallet, created_at: now, updated_at: now })
      .onConflict('wallet')
      .ignore();
    return (await this.lockWallets(trx, [wallet])).get(wallet) ?? balanceOf(wallet, undefined);
  }

  /**
   * Locks the rows of those `wallets` that have one, in address order (so transactions that lock
   * several never wait on each other in a cycle), and reads their balances. PostgreSQL: SELECT … FOR
   * UPDATE. SQLite: the first statement writes, so the transaction holds the database's write lock
   * from there on (also against another process on the same file, which waits on busy_timeout); that
   * write answers the balances itself (RETURNING), one statement for the lock and the read.
   */
  async lockWallets(trx: Knex.Transaction, wallets: readonly string[]): Promise<Map<string, Balance>> {
    const columns = WALLET_MONEY.map((column) => asText(trx, column));
    let rows: WalletRow[];
    if (this.postgres) {
      rows = (await this.lockQuery(trx, wallets)) as WalletRow[];
    } else {
      const returning = trx.raw(['wallet', ...columns.map(() => '?')].join(', '), columns);
      rows = (await trx.raw(
        `update ledger_wallets set updated_at = updated_at where wallet in (${wallets.map(() => '?').join(', ')}) returning ?`,
        [...wallets, returning],
      )) as WalletRow[];
    }
    return new Map(rows.map((row) => [row.wallet, balanceOf(row.wallet, row)]));
  }

  /** PostgreSQL's statement of `lockWallets`: the rows of `wallets` (WalletRow), locked in address order. */
  lockQuery(trx: Knex.Transaction, wallets: readonly string[]): Knex.QueryBuilder {
    return trx('ledger_wallets')
      .whereIn('wallet', wallets)
      .orderBy('wallet')
      .select('wallet', ...WALLET_MONEY.map((column) => asText(trx, column)))
      .forUpdate();
  }

  /**
   * Appends an entry and applies it to the running totals, inside the caller's locked transaction.
   * Returns undefined (and changes nothing) when the wallet already has an entry with this key.
   */
  async append(
    trx: Knex.Transaction,
    entry: {
      wallet: string;
      kind: EntryKind;
      amount: bigint;
      idempotencyKey: string;
      agentId?: string;
      reference?: string;
    },
    /**
     * knownNew: the key has no entry (not looked for). release: an open hold (read under the lock)
     * this entry settles, deleted and taken out of held spend by the same writes.
     */
    options: { knownNew?: boolean; release?: { id: string; amount: bigint } } = {},
  ): Promise<LedgerEntry | undefined> {
    if (entry.amount <= 0n || entry.amount > MAX_AMOUNT * 1000n) {
      throw new SigilError('internal', `Ledger entry amount out of range: ${entry.amount}`);
    }
    if (!options.knownNew) {
      const existing = await trx('ledger_entries')
        .where({ wallet: entry.wallet, idempotency_key: entry.idempotencyKey })
        .first('id');
      if (existing) return undefined;
    }
    const now = this.now();
    const row = {
      wallet: entry.wallet,
      kind: entry.kind,
      amount: entry.amount.toString(),
      agent_id: entry.agentId ?? null,
      idempotency_key: entry.idempotencyKey,
      reference: entry.reference ?? null,
      created_at: now,
    };
    const effects: Partial<Record<TotalColumn, 1 | -1>> = ENTRY_EFFECTS[entry.kind];
    const update: Record<string, unknown> = { updated_at: now };
    for (const [column, sign] of Object.entries(effects) as [TotalColumn, 1 | -1][]) {
      update[column] = trx.raw(`?? ${sign > 0 ? '+' : '-'} cast(? as bigint)`, [column, row.amount]);
    }
    const { release } = options;
    if (release)
      update.held_spend = trx.raw('?? - cast(? as bigint)', ['held_spend', release.amount.toString()]);
    const deleteHold = release ? trx('ledger_holds').where({ id: release.id }).delete() : undefined;
    const insertEntry = trx('ledger_entries').insert(row, ['id']);
    const updateWallet = trx('ledger_wallets').where({ wallet: entry.wallet }).update(update);
    const addSpend =
      entry.kind === 'charge' && entry.agentId !== undefined
        ? trx('agent_daily_spend')
            .insert({
              agent_id: entry.agentId,
              day: utcDay(new Date(now)).start.getTime(),
              amount: row.amount,
            })
            .onConflict(['agent_id', 'day'])
            .merge({ amount: trx.raw('?? + cast(? as bigint)', ['agent_daily_spend.amount', row.amount]) })
        : undefined;
    let id: string | number;
    if (this.postgres) {
      // One round trip while the wallet's lock is held: data-modifying CTEs all run, in one statement.
      let query = trx.with('entry', insertEntry).with('wallet_totals', updateWallet);
      if (addSpend) query = query.with('agent_spend', addSpend);
      if (deleteHold) query = query.with('released_hold', deleteHold);
      const [inserted] = (await query.select('id').from('entry')) as { id: string | number }[];
      id = (inserted as { id: string | number }).id;
    } else {
      if (deleteHold) await deleteHold;
      const [inserted] = (await insertEntry) as { id: string | number }[];
      await updateWallet;
      if (addSpend) await addSpend;
      id = (inserted as { id: string | number }).id;
    }
    return entryOf({ ...row, id });
  }

  /** Charges an agent's spend, once per idempotency key, in a group commit (charge-batch.ts). */
  async charge(input: ChargeInput): Promise<Charge> {
    return this.charges.charge(chargeInput(input));
  }

  /** Whether `agentId` may start spending `amount` now (see checkSpend); throws SpendRefused if not. */
  check(wallet: string, agentId: string, amount = 0n): Promise<{ balance: Balance; budgets: Budgets }> {
    return checkSpend(this, wallet, agentId, amount);
  }

  /** The agent's limits and what it has spent in each current window. 404 unless `wallet` owns it. */
  async budgets(wallet: string, agentId: string): Promise<Budgets> {
    return (await readBudgets(this.deps.db, this.deps.clock.now(), checksumAddress(wallet), agentId)).budgets;
  }

  /** Replaces the agent's limits (null: no limit). Applies at once to the current windows' spend. */
  async setBudgets(wallet: string, agentId: string, limits: BudgetLimits): Promise<Budgets> {
    const address = checksumAddress(wallet);
    await this.withWallet(address, (trx) =>
      writeBudgetLimits(trx, { wallet: address, agentId, limits, now: this.now() }),
    );
    return this.budgets(address, agentId);
  }

  /** A page of the wallet's entries, newest first (see historyPage). */
  history(
    wallet: string,
    options: { limit: number; cursor?: string; kinds?: readonly EntryKind[] },
  ): Promise<{ entries: LedgerEntry[]; nextCursor: string | undefined }> {
    return historyPage(this.deps.db, wallet, options);
  }

  /**
   * Records the deposit address's token balance read at `block` (a confirmed block). A read of an
   * older block than the one recorded is ignored, so a slow reader never puts an outdated balance back.
   */
  async recordOnChainBalance(
    wallet: string,
    balance: bigint,
    block: bigint,
    trx?: Knex.Transaction,
  ): Promise<boolean> {
    const address = checksumAddress(wallet);
    const write = async (db: Knex) =>
      db('ledger_wallets')
        .where({ wallet: address })
        .andWhere('balance_block', '<=', block.toString())
        .update({
          on_chain_balance: balance.toString(),
          balance_block: block.toString(),
          balance_updated_at: this.now(),
          updated_at: this.now(),
        });
    if (trx) return (await write(trx)) > 0;
    return this.withWallet(address, async (locked) => (await write(locked)) > 0);
  }

  /**
   * Recomputes each running total from the entries (and held spend from the open holds) with SQL sums
   * and compares: what a property test, the benchmark and an operator check. `ok` when all agree.
   */
  audit(wallet?: string): Promise<LedgerAudit> {
    return auditLedger(this.deps.db, wallet);
  }
}
