import type { Knex } from 'knex';
import { agentNotFound } from '../agents.ts';
import { balanceOf, ENTRY_EFFECTS, type Balance, type TotalColumn, type WalletRow } from './balance.ts';
import { readAgentsBudgets, refuseOverBudget, withSpent } from './budgets.ts';
import { chargeOnce, sameCharge, type Charge, type ChargeInput } from './charges.ts';
import {
  CHARGE_KEY_PREFIX,
  entryColumns,
  entryOf,
  walletKey,
  type EntryRow,
  type LedgerEntry,
} from './entries.ts';
import { SpendRefused } from './errors.ts';
import type { Ledger } from './ledger.ts';
import { utcDay } from './windows.ts';

/** The most charges one transaction decides and writes (PostgreSQL binds at most 65,535 values). */
const MAX_BATCH = 500;

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

interface Pending {
  input: ChargeInput;
  resolve: (charge: Charge) => void;
  reject: (err: unknown) => void;
}

type Outcome = { charge: Charge } | { refusal: unknown };

/**
 * Group commit of charges. A charge arriving while no batch runs starts one a turn of the event loop
 * later (a lone charge waits for nothing else), which takes every charge queued by then; the charges
 * that arrive while a batch runs wait for it, and the next batch starts a turn after it ends, so it
 * takes them together with those the answers caused (a caller charging again at once). Starting the
 * next batch at once split the callers into two alternating groups, twice the transactions for the
 * same charges (bench: ledger, 50 in flight went 1 + 49 a round; now 50 in one batch). A batch is one
 * transaction of a fixed number of statements however many charges it holds: lock the batch's
 * wallets in address order (so two batches, or a batch and a single wallet transaction, never wait on
 * each other in a cycle) and find every key's earlier charge (PostgreSQL: in one statement), read
 * every agent's budgets in one query, decide the charges in memory in arrival order (exactly the
 * checks of a lone charge, each seeing the ones before it), then write the entries, the wallets'
 * running totals and the agents' day spend (PostgreSQL: in one statement). On PostgreSQL that is
 * BEGIN, three statements and COMMIT. Refusals are answered after the
 * commit, like the charges: nothing is answered that a rollback could undo. Per charge that is a
 * few bound values instead of five round trips and a commit (bench: ledger). The price: a batch waits
 * for every wallet lock it needs, so a lock held elsewhere delays the batch's other wallets too; every
 * wallet transaction is database statements only (no chain or network call inside), so that wait is
 * one transaction's length.
 *
 * A batch whose transaction fails (a lost connection, a statement timeout, an entry the database
 * refuses) changed nothing; its charges are then made one by one in arrival order (`chargeOnce`), so
 * one charge's fault stays its own and the decisions stay those of the batch.
 */
export class ChargeBatcher {
  private queue: Pending[] = [];
  private draining = false;

  constructor(private readonly ledger: Ledger) {}

  charge(input: ChargeInput): Promise<Charge> {
    return new Promise((resolve, reject) => {
      this.queue.push({ input, resolve, reject });
      if (!this.draining) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.draining = true;
    await nextTurn();
    while (this.queue.length > 0) {
      await this.run(this.queue.splice(0, MAX_BATCH));
      await nextTurn();
    }
    this.draining = false;
  }

  private async run(batch: Pending[]): Promise<void> {
    let outcomes: Outcome[];
    try {
      outcomes = await this.ledger.db.transaction((trx) => decideAndWrite(this.ledger, trx, batch));
    } catch (err) {
      this.ledger.logger.warn(
        { err, charges: batch.length },
        'ledger: a batch of charges failed; charging each alone',
      );
      // In arrival order, as the batch would have decided them.
      for (const pending of batch)
        await chargeOnce(this.ledger, pending.input).then(pending.resolve, pending.reject);
      return;
    }
    outcomes.forEach((outcome, i) => {
      const pending = batch[i] as Pending;
      if ('charge' in outcome) pending.resolve(outcome.charge);
      else pending.reject(outcome.refusal);
    });
  }
}

/** What a batch decided for one charge, before the write gives new entries their ids. */
type Decision =
  | { refusal: unknown }
  | { replay: LedgerEntry }
  | { repeats: string } // the key of a charge earlier in this batch
  | { charges: string }; // this charge is new, under this key

async function decideAndWrite(ledger: Ledger, trx: Knex.Transaction, batch: Pending[]): Promise<Outcome[]> {
  const now = ledger.clock.now();
  const inputs = batch.map((pending) => pending.input);
  const wallets = [...new Set(inputs.map((input) => input.wallet))].sort();
  // A wallet without a row has nothing to spend: every charge on it is refused, so none is created.
  const { balances, earlier } = await lockAndFindEarlier(ledger, trx, wallets, inputs);
  const agents = await readAgentsBudgets(trx, now, [...new Set(inputs.map((input) => input.agentId))], {
    postgres: ledger.postgres,
  });

  const available = new Map<string, bigint>();
  const spentInBatch = new Map<string, bigint>();
  const newCharges = new Map<string, ChargeInput>();
  const decisions = inputs.map((input): Decision => {
    try {
      const agent = agents.get(input.agentId);
      if (!agent || agent.wallet !== input.wallet) throw agentNotFound(input.agentId);
      const key = walletKey(input);
      const first = earlier.get(key);
      if (first) return { replay: sameCharge(first, input) };
      if (newCharges.has(key)) return { repeats: key };
      const spent = spentInBatch.get(input.agentId) ?? 0n;
      refuseOverBudget(withSpent(agent.budgets, spent), input.amount, { agentId: input.agentId });
      const left =
        available.get(input.wallet) ??
        (balances.get(input.wallet) ?? balanceOf(input.wallet, undefined)).available;
      if (input.amount > left) {
        throw new SpendRefused('available', {
          requested: input.amount,
          remaining: left,
          agentId: input.agentId,
        });
      }
      available.set(input.wallet, left - input.amount);
      spentInBatch.set(input.agentId, spent + input.amount);
      newCharges.set(key, input);
      return { charges: key };
    } catch (refusal) {
      return { refusal };
    }
  });

  const written = await writeCharges(trx, ledger.postgres, [...newCharges.values()], now);
  return decisions.map((decision, i): Outcome => {
    if ('refusal' in decision) return decision;
    if ('replay' in decision) return { charge: { entry: decision.replay, replayed: true } };
    if ('charges' in decision)
      return { charge: { entry: written.get(decision.charges) as LedgerEntry, replayed: false } };
    try {
      const entry = sameCharge(written.get(decision.repeats) as LedgerEntry, inputs[i] as ChargeInput);
      return { charge: { entry, replayed: true } };
    } catch (refusal) {
      return { refusal };
    }
  });
}

/**
 * Locks the batch's wallets (`Ledger.lockWallets`) and finds the keys that already charged, by wallet
 * and the caller's key. PostgreSQL: in one statement, one round trip fewer. Its snapshot is taken
 * before it waits for a lock, so a charge that the lock's holder committed meanwhile under one of the
 * batch's keys may be missing: the batch then writes that key again, the unique index on (wallet,
 * key) refuses it, and the batch is made one by one, which answers it as a replay. Nothing else read
 * here may be stale (the locked rows are their latest versions); the budgets are read after the locks.
 */
async function lockAndFindEarlier(
  ledger: Ledger,
  trx: Knex.Transaction,
  wallets: readonly string[],
  inputs: ChargeInput[],
): Promise<{ balances: Map<string, Balance>; earlier: Map<string, LedgerEntry> }> {
  const walletOfEach = inputs.map((input) => input.wallet);
  const keys = inputs.map((input) => CHARGE_KEY_PREFIX + input.idempotencyKey);
  const query = trx('ledger_entries').select(...entryColumns(trx));
  const byKey = (rows: EntryRow[]) =>
    new Map(rows.map((row) => entryOf(row)).map((entry) => [walletKey(entry), entry]));
  if (!ledger.postgres) {
    const balances = await ledger.lockWallets(trx, wallets);
    const rows = (await query.whereIn(
      ['wallet', 'idempotency_key'],
      walletOfEach.map((wallet, i) => [wallet, keys[i] as string]),
    )) as EntryRow[];
    return { balances, earlier: byKey(rows) };
  }
  // One index lookup a key, whatever the planner's statistics say (a join against the unnested
  // arrays was planned as a scan of every entry in a table it misjudged, as a fresh one), with the
  // same text for every batch size. `limit 1` (a key is unique per wallet) keeps it a subquery.
  const lookup = query.whereRaw('wallet = batch_wallet and idempotency_key = batch_key').limit(1);
  const result = (await trx.raw(
    `with locked as (?)
     select (select json_agg(locked) from locked) as wallets,
       (select json_agg(to_jsonb(e) || jsonb_build_object('id', cast(e.id as text)))
        from unnest(?::text[], ?::text[]) as batch(batch_wallet, batch_key) cross join lateral (?) as e) as earlier`,
    [ledger.lockQuery(trx, wallets), walletOfEach, keys, lookup],
  )) as { rows: { wallets: WalletRow[] | null; earlier: EntryRow[] | null }[] };
  const [row] = result.rows;
  const balances = new Map(
    (row?.wallets ?? []).map((locked) => [locked.wallet, balanceOf(locked.wallet, locked)]),
  );
  return { balances, earlier: byKey(row?.earlier ?? []) };
}

/**
 * Appends a batch's new charges (each key new to its wallet) inside its transaction, which holds their
 * wallets' locks: the entries, each wallet's running totals and each agent's day spend. PostgreSQL:
 * one statement of data-modifying CTEs over unnested arrays (the same text whatever the batch size);
 * SQLite: one statement each. The entries by wallet and key.
 */
async function writeCharges(
  trx: Knex.Transaction,
  postgres: boolean,
  charges: readonly ChargeInput[],
  now: Date,
): Promise<Map<string, LedgerEntry>> {
  if (charges.length === 0) return new Map();
  const at = now.getTime();
  const day = utcDay(now).start.getTime();
  const sum = (by: (charge: ChargeInput) => string) => {
    const sums = new Map<string, bigint>();
    for (const charge of charges) sums.set(by(charge), (sums.get(by(charge)) ?? 0n) + charge.amount);
    return { names: [...sums.keys()], amounts: [...sums.values()].map(String) };
  };
  const byWallet = sum((charge) => charge.wallet);
  const byAgent = sum((charge) => charge.agentId);
  const rows: EntryRow[] = charges.map((charge) => ({
    id: 0,
    wallet: charge.wallet,
    kind: 'charge',
    amount: charge.amount.toString(),
    agent_id: charge.agentId,
    idempotency_key: CHARGE_KEY_PREFIX + charge.idempotencyKey,
    reference: null,
    created_at: at,
  }));
  // What a charge does to the running totals (balance.ts).
  const effects = (Object.entries(ENTRY_EFFECTS.charge) as [TotalColumn, 1 | -1][]).map(
    ([column, sign]) => [column, sign > 0 ? '+' : '-'] as const,
  );
  const totals = (amount: string) =>
    effects.map(([column, op]) => `${column} = ledger_wallets.${column} ${op} ${amount}`).join(', ');
  let inserted: { id: string | number; wallet: string; idempotency_key: string }[];
  if (postgres) {
    const result = await trx.raw(
      `with entry as (
         insert into ledger_entries (wallet, kind, amount, agent_id, idempotency_key, created_at)
         select wallet, 'charge', amount, agent_id, key, ? from unnest(?::text[], ?::bigint[], ?::text[], ?::text[]) as c(wallet, amount, agent_id, key)
         returning id, wallet, idempotency_key),
       wallet_totals as (
         update ledger_wallets set ${totals('w.amount')}, updated_at = ?
         from unnest(?::text[], ?::bigint[]) as w(wallet, amount) where ledger_wallets.wallet = w.wallet),
       agent_spend as (
         insert into agent_daily_spend (agent_id, day, amount)
         select agent_id, ?, amount from unnest(?::text[], ?::bigint[]) as s(agent_id, amount)
         on conflict (agent_id, day) do update set amount = agent_daily_spend.amount + excluded.amount)
       select id, wallet, idempotency_key from entry`,
      [
        at,
        rows.map((row) => row.wallet),
        rows.map((row) => row.amount),
        rows.map((row) => row.agent_id as string),
        rows.map((row) => row.idempotency_key),
        at,
        byWallet.names,
        byWallet.amounts,
        day,
        byAgent.names,
        byAgent.amounts,
      ],
    );
    inserted = (result as { rows: typeof inserted }).rows;
  } else {
    inserted = (await trx('ledger_entries').insert(
      rows.map(({ id: _id, ...row }) => row),
      ['id', 'wallet', 'idempotency_key'],
    )) as typeof inserted;
    const cases = byWallet.names.map(() => 'when ? then cast(? as bigint)').join(' ');
    await trx('ledger_wallets')
      .whereIn('wallet', byWallet.names)
      .update({
        updated_at: at,
        ...Object.fromEntries(
          effects.map(([column, op]) => [
            column,
            trx.raw(`?? ${op} case wallet ${cases} end`, [
              column,
              ...byWallet.names.flatMap((wallet, i) => [wallet, byWallet.amounts[i] as string]),
            ]),
          ]),
        ),
      });
    await trx('agent_daily_spend')
      .insert(byAgent.names.map((agentId, i) => ({ agent_id: agentId, day, amount: byAgent.amounts[i] })))
      .onConflict(['agent_id', 'day'])
      .merge({ amount: trx.raw('?? + excluded.amount', ['agent_daily_spend.amount']) });
  }
  const rowKey = (row: { wallet: string; idempotency_key: string }) =>
    walletKey({ wallet: row.wallet, idempotencyKey: row.idempotency_key });
  const ids = new Map(inserted.map((row) => [rowKey(row), row.id]));
  const entries = rows.map((row) => entryOf({ ...row, id: ids.get(rowKey(row)) as string | number }));
  return new Map(entries.map((entry) => [walletKey(entry), entry]));
}
