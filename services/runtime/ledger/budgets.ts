import type { Knex } from 'knex';
import { agentNotFound } from '../agents.ts';
import { toAmount } from './amounts.ts';
import { SpendRefused, type SpendPurpose } from './errors.ts';
import { BUDGET_WINDOWS, windowBounds, type BudgetWindow } from './windows.ts';

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

/** The columns of the open hold `readBudgets` was asked for (`holdKey`), as text; all null without one. */
export const OPEN_HOLD_COLUMNS = [
  'id',
  'agent_id',
  'amount',
  'created_at',
  'expires_at',
  'settle_cost',
] as const;
export type OpenHoldRow = Record<(typeof OPEN_HOLD_COLUMNS)[number], string | null>;

/**
 * In one query: that `wallet` owns the agent (404 otherwise), its limits, its spend in each window
 * current at `now` (sums over the agent's daily spend rows: windows are whole UTC days), its open
 * holds, given a key whether the wallet already has an entry under it, and given `holdKey` the
 * wallet's open hold under that key (holds.ts: read after the wallet's lock, so one read for all).
 */
export async function readBudgets(
  db: Knex,
  now: Date,
  wallet: string,
  agentId: string,
  options: { replayKey?: string; holdKey?: string } = {},
): Promise<BudgetsRead> {
  const read = await readBudgetsOf(db, now, wallet, agentId, options);
  if (!read) throw agentNotFound(agentId);
  return read;
}

export interface BudgetsRead {
  budgets: Budgets;
  replayId: string | undefined;
  openHold: OpenHoldRow | undefined;
}

/** `readBudgets`, undefined when `wallet` has no such agent. */
export async function readBudgetsOf(
  db: Knex,
  now: Date,
  wallet: string,
  agentId: string,
  options: { replayKey?: string; holdKey?: string } = {},
): Promise<BudgetsRead | undefined> {
  const replaySql =
    options.replayKey === undefined
      ? 'null as replay_id'
      : '(select cast(e.id as text) from ledger_entries e where e.wallet = ? and e.idempotency_key = ?) as replay_id';
  const replayBindings = options.replayKey === undefined ? [] : [wallet, options.replayKey];
  const hold =
    options.holdKey === undefined
      ? { columns: '', join: '', bindings: [] }
      : {
          columns: OPEN_HOLD_COLUMNS.map((column) => `, cast(oh.${column} as text) as hold_${column}`).join(
            '',
          ),
          join: ' left join ledger_holds oh on oh.wallet = ? and oh.idempotency_key = ?',
          bindings: [wallet, options.holdKey],
        };
  const [row] = await budgetRows(
    db,
    now,
    replaySql + hold.columns,
    replayBindings,
    `${hold.join} where a.id = ? and a.wallet = ?`,
    [...hold.bindings, agentId, wallet],
  );
  if (!row) return undefined;
  const openHold =
    row.hold_id === null || row.hold_id === undefined
      ? undefined
      : (Object.fromEntries(OPEN_HOLD_COLUMNS.map((c) => [c, row[`hold_${c}`] ?? null])) as OpenHoldRow);
  return { budgets: budgetsOf(row, now), replayId: row.replay_id ?? undefined, openHold };
}

/** The same budgets once `amount` of the agent's holds is given back (a hold being settled). */
export function withoutHeld(budgets: Budgets, amount: bigint): Budgets {
  if (amount === 0n) return budgets;
  return changed(budgets, (state) => ({
    spent: state.spent,
    held: state.held > amount ? state.held - amount : 0n,
  }));
}

/**
 * The budgets of several agents in one query (a batch of charges: charge-batch.ts), each with the
 * wallet that owns it; an agent that does not exist is absent from the map.
 */
export async function readAgentsBudgets(
  db: Knex,
  now: Date,
  agentIds: readonly string[],
  options: { postgres: boolean },
): Promise<Map<string, { wallet: string; budgets: Budgets }>> {
  // PostgreSQL: one array, so the statement's text (and plan) is the same whatever the batch's size.
  const [where, bindings] = options.postgres
    ? ['a.id = any(?::text[])', [[...agentIds]]]
    : [`a.id in (${agentIds.map(() => '?').join(', ')})`, [...agentIds]];
  const rows = await budgetRows(db, now, 'null as replay_id', [], ` where ${where}`, bindings);
  return new Map(
    rows.map((row) => [row.id as string, { wallet: row.wallet as string, budgets: budgetsOf(row, now) }]),
  );
}

/**
 * The same budgets after `extra` more spend in every window (charges decided earlier in a batch,
 * not yet written).
 */
export function withSpent(budgets: Budgets, extra: bigint): Budgets {
  if (extra === 0n) return budgets;
  return changed(budgets, (state) => ({ spent: state.spent + extra, held: state.held }));
}

/** Each window with its spend and holds changed, and so what remains. */
function changed(
  budgets: Budgets,
  change: (state: BudgetWindowState) => { spent: bigint; held: bigint },
): Budgets {
  const after = (state: BudgetWindowState): BudgetWindowState => {
    const { spent, held } = change(state);
    return { ...state, spent, held, remaining: remainingOf(state.limit, spent, held) };
  };
  return { daily: after(budgets.daily), weekly: after(budgets.weekly), monthly: after(budgets.monthly) };
}

type BudgetRow = Record<string, string | null>;

const windowsAt = (now: Date): Record<BudgetWindow, { start: Date; resetsAt: Date }> => ({
  daily: windowBounds('daily', now),
  weekly: windowBounds('weekly', now),
  monthly: windowBounds('monthly', now),
});

async function budgetRows(
  db: Knex,
  now: Date,
  replaySql: string,
  replayBindings: string[],
  /** The joins after the agents' and budgets' and the where clause, each with its leading space. */
  where: string,
  whereBindings: (string | string[])[],
): Promise<BudgetRow[]> {
  const bounds = windowsAt(now);
  const spentSql = (window: BudgetWindow) =>
    `(select cast(coalesce(sum(s.amount), 0) as text) from agent_daily_spend s where s.agent_id = a.id and s.day >= ?) as ${window}_spent`;
  const sql = [
    'select a.id, a.wallet,',
    ...BUDGET_WINDOWS.map((window) => `cast(b.${window}_limit as text) as ${window}_limit,`),
    ...BUDGET_WINDOWS.map((window) => `${spentSql(window)},`),
    '(select cast(coalesce(sum(h.amount), 0) as text) from ledger_holds h where h.agent_id = a.id) as held,',
    replaySql,
    `from agents a left join agent_budgets b on b.agent_id = a.id${where}`,
  ].join(' ');
  const bindings: (string | number | string[])[] = [
    ...BUDGET_WINDOWS.map((window) => bounds[window].start.getTime()),
    ...replayBindings,
    ...whereBindings,
  ];
  const result = (await db.raw(sql, bindings)) as unknown;
  // knex.raw answers { rows } on PostgreSQL and the rows themselves on SQLite.
  return (Array.isArray(result) ? result : (result as { rows: unknown[] }).rows) as BudgetRow[];
}

function budgetsOf(row: BudgetRow, now: Date): Budgets {
  const bounds = windowsAt(now);
  const held = toAmount(row.held ?? '0');
  const state = (window: BudgetWindow): BudgetWindowState => {
    const rawLimit = row[`${window}_limit`];
    const limit = rawLimit === null || rawLimit === undefined ? null : toAmount(rawLimit);
    const spent = toAmount(row[`${window}_spent`] ?? '0');
    return { limit, spent, held, remaining: remainingOf(limit, spent, held), ...bounds[window] };
  };
  return { daily: state('daily'), weekly: state('weekly'), monthly: state('monthly') };
}

const remainingOf = (limit: bigint | null, spent: bigint, held: bigint): bigint | null =>
  limit === null ? null : limit > spent + held ? limit - spent - held : 0n;

/** Replaces the limits of an agent `wallet` owns (404 otherwise), inside the wallet's locked transaction. */
export async function writeBudgetLimits(
  trx: Knex.Transaction,
  input: { wallet: string; agentId: string; limits: BudgetLimits; now: number },
): Promise<void> {
  const { agentId, limits } = input;
  const agent = await trx('agents').where({ id: agentId, wallet: input.wallet }).first('id');
  if (!agent) throw agentNotFound(agentId);
  const row = {
    agent_id: agentId,
    daily_limit: limits.daily?.toString() ?? null,
    weekly_limit: limits.weekly?.toString() ?? null,
    monthly_limit: limits.monthly?.toString() ?? null,
    updated_at: input.now,
  };
  await trx('agent_budgets').insert(row).onConflict('agent_id').merge();
}

/**
 * Throws SpendRefused naming the first budget window without room for `amount`; the refusal says
 * `requested` (by default `amount`) and, when given, the work refused.
 */
export function refuseOverBudget(
  budgets: Budgets,
  amount: bigint,
  spend: { agentId: string; purpose?: SpendPurpose | undefined; requested?: bigint },
): void {
  const { agentId, purpose, requested = amount } = spend;
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
        ...(purpose === undefined ? {} : { purpose }),
      });
    }
  }
}
