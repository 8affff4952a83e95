import type { Knex } from 'knex';
import { getAddress } from 'viem';
import type { Clock } from '../../../core/clock.ts';
import { dialectOf, isConstraintViolation, type Database } from '../../../core/db/database.ts';
import { SigilError } from '@sigil/plugin-api';
import type { Logger } from '../../../core/log.ts';
import { agentNotFound } from '../agents.ts';
import { asText, MAX_AMOUNT, toAmount } from './amounts.ts';
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
import { SpendRefused } from './errors.ts';
import { BUDGET_WINDOWS, utcDay, windowBounds, type BudgetWindow } from './windows.ts';

export { ENTRY_KINDS, type Balance, type EntryKind } from './balance.ts';

export interface LedgerEntry {
  id: string;
  wallet: string;
  kind: EntryKind;
  amount: bigint;
  agentId: string | undefined;
  /** The caller's key for a charge; the ledger's own for other kinds (e.g. `withdrawal:<id>`). */
  idempotencyKey: string;
  /** The withdrawal or sweep an entry belongs to, or a deposit's `<transaction>:<log index>`. */
  reference: string | undefined;
  createdAt: Date;
}

export interface Charge {
  entry: LedgerEntry;
  /** True when the idempotency key had already charged: this is the first charge, not a new one. */
  replayed: boolean;
}

export interface BudgetLimits {
  daily: bigint | null;
  weekly: bigint | null;
  monthly: bigint | null;
}

export interface BudgetWindowState {
  limit: bigint | null;
  spent: bigint;
  /** The agent's open holds: counted in every current window until they settle. */
  held: bigint;
  /** limit − spent − held, never below 0; null without a limit. */
  remaining: bigint | null;
  start: Date;
  resetsAt: Date;
}

export type Budgets = Record<BudgetWindow, BudgetWindowState>;

export interface LedgerSettings {
  /** Available balance a chat needs to start. */
  minimumBalance: bigint;
}

interface EntryRow {
  id: string | number;
  wallet: string;
  kind: EntryKind;
  amount: string;
  agent_id: string | null;
  idempotency_key: string;
  reference: string | null;
  created_at: string | number;
}

/** Charges carry the caller's key under this prefix, so they can never meet the ledger's own keys. */
export const CHARGE_KEY_PREFIX = 'charge:';

export const IDEMPOTENCY_KEY = /^[A-Za-z0-9._:-]{1,200}$/;

/**
 * The wallet ledger: append-only entries in integer base units, per-agent budgets in calendar UTC
 * windows, and the balance rule. Every change to a wallet's money runs in one transaction that first
 * locks the wallet's row (PostgreSQL: SELECT … FOR UPDATE; SQLite: a write that takes the database's
 * write lock, and knex's single connection serialises this process's transactions), so checks and the
 * entry they allow are one atomic step however many requests race.
 */
export class Ledger {
  readonly settings: LedgerSettings;
  private readonly postgres: boolean;

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

  now(): number {
    return this.deps.clock.now().getTime();
  }

  async balance(wallet: string): Promise<Balance> {
    const row = (await this.deps
      .db('ledger_wallets')
      .where({ wallet: getAddress(wallet) })
      .first(WALLET_MONEY.map((column) => asText(this.deps.db, column)))) as WalletRow | undefined;
    return balanceOf(getAddress(wallet), row);
  }

  /**
   * Runs `work` holding the wallet's lock, in one transaction (the wallet's row is created first when
   * it has none). Everything that changes a wallet's money goes through here.
   */
  async withWallet<T>(
    wallet: string,
    work: (trx: Knex.Transaction, balance: Balance) => Promise<T>,
  ): Promise<T> {
    const address = getAddress(wallet);
    return this.deps.db.transaction(async (trx) => work(trx, await this.lock(trx, address)));
  }

  private async lock(trx: Knex.Transaction, wallet: string): Promise<Balance> {
    const read = async () => {
      const query = trx('ledger_wallets')
        .where({ wallet })
        .first(WALLET_MONEY.map((column) => asText(trx, column)));
      return (await (this.postgres ? query.forUpdate() : query)) as WalletRow | undefined;
    };
    if (!this.postgres) {
      // The first statement writes, so this transaction holds SQLite's write lock from here on (also
      // against another process on the same file, which waits on busy_timeout instead of racing).
      await trx('ledger_wallets')
        .where({ wallet })
        .update({ updated_at: trx.ref('updated_at') });
    }
    let row = await read();
    if (!row) {
      const now = this.now();
      await trx('ledger_wallets')
        .insert({ wallet, created_at: now, updated_at: now })
        .onConflict('wallet')
        .ignore();
      row = await read();
    }
    return balanceOf(wallet, row);
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
    options: { knownNew?: boolean } = {},
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
      const [inserted] = (await query.select('id').from('entry')) as { id: string | number }[];
      id = (inserted as { id: string | number }).id;
    } else {
      const [inserted] = (await insertEntry) as { id: string | number }[];
      await updateWallet;
      if (addSpend) await addSpend;
      id = (inserted as { id: string | number }).id;
    }
    return entryOf({ ...row, id });
  }

  /**
   * Charges an agent's spend, once per idempotency key: the budget windows and the available balance
   * are checked and the entry appended in one atomic step. A refusal (SpendRefused, 402) records
   * nothing, so the same key may be tried again; a key that charged answers that first charge again
   * (`replayed`), and a key reused for another agent or amount is a 409.
   */
  async charge(input: {
    wallet: string;
    agentId: string;
    amount: bigint;
    idempotencyKey: string;
  }): Promise<Charge> {
    if (input.amount <= 0n || input.amount > MAX_AMOUNT) {
      throw new SigilError('invalid_request', `A charge must be between 1 and ${MAX_AMOUNT} base units`);
    }
    if (!IDEMPOTENCY_KEY.test(input.idempotencyKey)) {
      throw new SigilError(
        'invalid_request',
        'An idempotency key is 1 to 200 characters of A-Z a-z 0-9 . _ : -',
      );
    }
    const wallet = getAddress(input.wallet);
    const key = CHARGE_KEY_PREFIX + input.idempotencyKey;
    const attempt = () =>
      this.withWallet(wallet, async (trx, balance) => {
        const context = await this.readBudgets(trx, wallet, input.agentId, { replayKey: key });
        if (context.replayId !== undefined) {
          const first = (await this.entryByKey(trx, wallet, key)) as LedgerEntry;
          return { entry: sameCharge(first, input), replayed: true };
        }
        refuseOverBudget(context.budgets, input.amount, input.agentId);
        if (input.amount > balance.available) {
          throw new SpendRefused('available', {
            requested: input.amount,
            remaining: balance.available,
            agentId: input.agentId,
          });
        }
        const entry = await this.append(
          trx,
          { wallet, kind: 'charge', amount: input.amount, idempotencyKey: key, agentId: input.agentId },
          { knownNew: true },
        );
        return { entry: entry as LedgerEntry, replayed: false };
      });
    try {
      return await attempt();
    } catch (err) {
      // Only reachable if two processes on one SQLite file race the first row of a wallet; then the
      // second attempt finds the first's charge. Any other broken constraint breaks it again.
      if (!isConstraintViolation(err)) throw err;
      return attempt();
    }
  }

  /**
   * Whether `agentId` may start spending now (what a chat checks before it runs): each budget window
   * has room for `amount` (at least 1 unit), then the available balance is at least the minimum
   * balance and at least `amount`. Throws SpendRefused naming the first limit that fails.
   */
  async check(wallet: string, agentId: string, amount = 0n): Promise<{ balance: Balance; budgets: Budgets }> {
    const address = getAddress(wallet);
    const { budgets } = await this.readBudgets(this.deps.db, address, agentId);
    refuseOverBudget(budgets, amount > 0n ? amount : 1n, agentId, amount);
    const balance = await this.balance(address);
    const minimum = this.settings.minimumBalance;
    if (balance.available < minimum) {
      throw new SpendRefused('minimum_balance', {
        requested: amount,
        remaining: balance.available,
        limit: minimum,
        agentId,
      });
    }
    if (amount > balance.available) {
      throw new SpendRefused('available', { requested: amount, remaining: balance.available, agentId });
    }
    return { balance, budgets };
  }

  /** The agent's limits and what it has spent in each current window. 404 unless `wallet` owns it. */
  async budgets(wallet: string, agentId: string): Promise<Budgets> {
    return (await this.readBudgets(this.deps.db, getAddress(wallet), agentId)).budgets;
  }

  /** Replaces the agent's limits (null: no limit). Applies at once to the current windows' spend. */
  async setBudgets(wallet: string, agentId: string, limits: BudgetLimits): Promise<Budgets> {
    const address = getAddress(wallet);
    await this.withWallet(address, async (trx) => {
      await this.ownAgent(trx, address, agentId);
      const row = {
        agent_id: agentId,
        daily_limit: limits.daily?.toString() ?? null,
        weekly_limit: limits.weekly?.toString() ?? null,
        monthly_limit: limits.monthly?.toString() ?? null,
        updated_at: this.now(),
      };
      await trx('agent_budgets').insert(row).onConflict('agent_id').merge();
    });
    return this.budgets(address, agentId);
  }

  private async ownAgent(db: Knex, wallet: string, agentId: string): Promise<void> {
    const agent = await db('agents').where({ id: agentId, wallet }).first('id');
    if (!agent) throw agentNotFound(agentId);
  }

  /**
   * In one query: that `wallet` owns the agent (404 otherwise), its limits, its spend in each current
   * window (sums over the agent's daily spend rows: windows are whole UTC days), its open holds, and,
   * given a key, whether the wallet already has an entry under it.
   */
  async readBudgets(
    db: Knex,
    wallet: string,
    agentId: string,
    options: { replayKey?: string } = {},
  ): Promise<{ budgets: Budgets; replayId: string | undefined }> {
    const now = this.deps.clock.now();
    const bounds: Record<BudgetWindow, { start: Date; resetsAt: Date }> = {
      daily: windowBounds('daily', now),
      weekly: windowBounds('weekly', now),
      monthly: windowBounds('monthly', now),
    };
    const spentSql = (window: BudgetWindow) =>
      `(select cast(coalesce(sum(s.amount), 0) as text) from agent_daily_spend s where s.agent_id = a.id and s.day >= ?) as ${window}_spent`;
    const replaySql =
      options.replayKey === undefined
        ? 'null as replay_id'
        : '(select cast(e.id as text) from ledger_entries e where e.wallet = ? and e.idempotency_key = ?) as replay_id';
    const sql = [
      'select a.id,',
      ...BUDGET_WINDOWS.map((window) => `cast(b.${window}_limit as text) as ${window}_limit,`),
      ...BUDGET_WINDOWS.map((window) => `${spentSql(window)},`),
      '(select cast(coalesce(sum(h.amount), 0) as text) from ledger_holds h where h.agent_id = a.id) as held,',
      replaySql,
      'from agents a left join agent_budgets b on b.agent_id = a.id where a.id = ? and a.wallet = ?',
    ].join(' ');
    const bindings: (string | number)[] = [
      ...BUDGET_WINDOWS.map((window) => bounds[window].start.getTime()),
      ...(options.replayKey === undefined ? [] : [wallet, options.replayKey]),
      agentId,
      wallet,
    ];
    const result = (await db.raw(sql, bindings)) as unknown;
    // knex.raw answers { rows } on PostgreSQL and the rows themselves on SQLite.
    const rows = (Array.isArray(result) ? result : (result as { rows: unknown[] }).rows) as Record<
      string,
      string | null
    >[];
    const row = rows[0];
    if (!row) throw agentNotFound(agentId);
    const held = toAmount(row.held ?? '0');
    const state = (window: BudgetWindow): BudgetWindowState => {
      const rawLimit = row[`${window}_limit`];
      const limit = rawLimit === null || rawLimit === undefined ? null : toAmount(rawLimit);
      const spent = toAmount(row[`${window}_spent`] ?? '0');
      return {
        limit,
        spent,
        held,
        remaining: limit === null ? null : limit > spent + held ? limit - spent - held : 0n,
        ...bounds[window],
      };
    };
    return {
      budgets: { daily: state('daily'), weekly: state('weekly'), monthly: state('monthly') },
      replayId: row.replay_id ?? undefined,
    };
  }

  async entryByKey(db: Knex, wallet: string, key: string): Promise<LedgerEntry | undefined> {
    const row = (await db('ledger_entries')
      .where({ wallet, idempotency_key: key })
      .first(...entryColumns(db))) as EntryRow | undefined;
    return row ? entryOf(row) : undefined;
  }

  /**
   * A page of the wallet's entries, newest first. `cursor` is the previous page's `nextCursor`;
   * entries appended meanwhile never shift a page (ids only grow).
   */
  async history(
    wallet: string,
    options: { limit: number; cursor?: string; kinds?: readonly EntryKind[] },
  ): Promise<{ entries: LedgerEntry[]; nextCursor: string | undefined }> {
    const db = this.deps.db;
    let query = db('ledger_entries')
      .where({ wallet: getAddress(wallet) })
      .orderBy('id', 'desc')
      .limit(options.limit + 1)
      .select(...entryColumns(db));
    if (options.cursor !== undefined) query = query.andWhere('id', '<', decodeCursor(options.cursor));
    if (options.kinds && options.kinds.length > 0) query = query.whereIn('kind', options.kinds);
    const rows = (await query) as EntryRow[];
    const page = rows.slice(0, options.limit).map(entryOf);
    const last = page[page.length - 1];
    return {
      entries: page,
      nextCursor: rows.length > options.limit && last ? encodeCursor(last.id) : undefined,
    };
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
    const address = getAddress(wallet);
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

/** The columns `entryOf` reads, the amount as text so it never passes through a float. */
const entryColumns = (db: Knex) =>
  [
    'id',
    'wallet',
    'kind',
    asText(db, 'amount'),
    'agent_id',
    'idempotency_key',
    'reference',
    'created_at',
  ] as const;

function entryOf(row: EntryRow): LedgerEntry {
  return {
    id: String(row.id),
    wallet: row.wallet,
    kind: row.kind,
    amount: toAmount(row.amount),
    agentId: row.agent_id ?? undefined,
    idempotencyKey: row.idempotency_key.startsWith(CHARGE_KEY_PREFIX)
      ? row.idempotency_key.slice(CHARGE_KEY_PREFIX.length)
      : row.idempotency_key,
    reference: row.reference ?? undefined,
    createdAt: new Date(Number(row.created_at)),
  };
}

/** A replayed key must name the same charge; anything else is a client bug worth a 409. */
function sameCharge(first: LedgerEntry, input: { agentId: string; amount: bigint }): LedgerEntry {
  if (first.kind !== 'charge' || first.agentId !== input.agentId || first.amount !== input.amount) {
    throw new SigilError('conflict', 'This idempotency key already charged another agent or amount', {
      hint: 'Use a new idempotency key for a new charge',
      details: { entryId: first.id, agentId: first.agentId, amount: first.amount.toString() },
    });
  }
  return first;
}

export function refuseOverBudget(
  budgets: Budgets,
  amount: bigint,
  agentId: string,
  requested = amount,
): void {
  for (const window of BUDGET_WINDOWS) {
    const state = budgets[window];
    if (state.limit === null || state.remaining === null) continue;
    if (amount > state.remaining) {
      throw new SpendRefused(window, {
        requested,
        remaining: state.remaining,
        limit: state.limit,
        resetsAt: state.resetsAt,
        agentId,
      });
    }
  }
}

const encodeCursor = (id: string): string => Buffer.from(`e:${id}`).toString('base64url');

function decodeCursor(cursor: string): string {
  const decoded = Buffer.from(cursor, 'base64url').toString('utf8');
  const match = /^e:([0-9]{1,19})$/.exec(decoded);
  if (!match) throw new SigilError('invalid_request', 'Invalid query.cursor: not a cursor this API returned');
  return match[1] as string;
}
