import type { Knex } from 'knex';
import { checksumAddress } from '../../../core/chain/address.ts';
import { asText, toAmount } from './amounts.ts';
import {
  balanceOf,
  ENTRY_EFFECTS,
  TOTAL_COLUMNS,
  WALLET_MONEY,
  type EntryKind,
  type TotalColumn,
  type WalletRow,
} from './balance.ts';

/** The running totals of a wallet's row that audit() recomputes: the entries' totals and held spend. */
const AUDITED_COLUMNS = [...TOTAL_COLUMNS, 'held_spend'] as const;
type AuditedColumn = (typeof AUDITED_COLUMNS)[number];

export interface AuditMismatch {
  wallet: string;
  total: AuditedColumn | 'negative' | 'missing_wallet_row' | 'daily_spend';
  recorded: bigint;
  fromEntries: bigint;
}

export interface LedgerAudit {
  ok: boolean;
  mismatches: AuditMismatch[];
  wallets: number;
}

/**
 * Recomputes each running total of `ledger_wallets` from the entries, and held spend from the open
 * holds, with SQL sums and compares: what a property test, the benchmark and an operator check. `ok`
 * when every wallet (or the one given) agrees.
 */
export async function auditLedger(db: Knex, wallet?: string): Promise<LedgerAudit> {
  const sums = (await db('ledger_entries')
    .modify((q) => {
      if (wallet) q.where({ wallet: checksumAddress(wallet) });
    })
    .groupBy('wallet', 'kind')
    .select('wallet', 'kind', db.raw('cast(sum(amount) as text) as total'))) as {
    wallet: string;
    kind: EntryKind;
    total: string;
  }[];
  const expected = new Map<string, Record<AuditedColumn, bigint>>();
  const noTotals = (): Record<AuditedColumn, bigint> => ({
    unsettled_spend: 0n,
    settled_spend: 0n,
    pending_withdrawals: 0n,
    withdrawn: 0n,
    held_spend: 0n,
  });
  for (const { wallet: owner, kind, total } of sums) {
    const totals = expected.get(owner) ?? noTotals();
    const effects: Partial<Record<TotalColumn, 1 | -1>> = ENTRY_EFFECTS[kind] ?? {};
    for (const [column, sign] of Object.entries(effects) as [TotalColumn, 1 | -1][]) {
      totals[column] += BigInt(sign) * toAmount(total);
    }
    expected.set(owner, totals);
  }
  const held = (await db('ledger_holds')
    .modify((q) => {
      if (wallet) q.where({ wallet: checksumAddress(wallet) });
    })
    .groupBy('wallet')
    .select('wallet', db.raw('cast(sum(amount) as text) as total'))) as { wallet: string; total: string }[];
  for (const { wallet: owner, total } of held) {
    const totals = expected.get(owner) ?? noTotals();
    totals.held_spend = toAmount(total);
    expected.set(owner, totals);
  }
  const rows = (await db('ledger_wallets')
    .modify((q) => {
      if (wallet) q.where({ wallet: checksumAddress(wallet) });
    })
    .select('wallet', ...WALLET_MONEY.map((column) => asText(db, column)))) as WalletRow[];
  const mismatches: AuditMismatch[] = [];
  for (const row of rows) {
    const want = expected.get(row.wallet) ?? noTotals();
    for (const column of AUDITED_COLUMNS) {
      if (toAmount(row[column]) !== want[column]) {
        mismatches.push({
          wallet: row.wallet,
          total: column,
          recorded: toAmount(row[column]),
          fromEntries: want[column],
        });
      }
    }
    const balance = balanceOf(row.wallet, row);
    if (balance.unsettledSpend < 0n || balance.pendingWithdrawals < 0n || balance.heldSpend < 0n) {
      mismatches.push({
        wallet: row.wallet,
        total: 'negative',
        recorded: balance.unsettledSpend,
        fromEntries: balance.pendingWithdrawals,
      });
    }
  }
  for (const owner of expected.keys()) {
    if (!rows.some((row) => row.wallet === owner)) {
      mismatches.push({ wallet: owner, total: 'missing_wallet_row', recorded: 0n, fromEntries: 0n });
    }
  }
  // Each agent's daily spend rows against its charges, grouped by UTC day.
  const scoped = (q: Knex.QueryBuilder, column: string) => {
    if (wallet)
      q.whereIn(
        column,
        db('agents')
          .where({ wallet: checksumAddress(wallet) })
          .select('id'),
      );
  };
  const byDay = (await db('ledger_entries')
    .where({ kind: 'charge' })
    .whereNotNull('agent_id')
    .modify((q) => scoped(q, 'agent_id'))
    .groupBy('agent_id', db.raw('(created_at / 86400000) * 86400000'))
    .select(
      'agent_id',
      db.raw('cast((created_at / 86400000) * 86400000 as text) as day'),
      db.raw('cast(sum(amount) as text) as total'),
    )) as { agent_id: string; day: string; total: string }[];
  const buckets = (await db('agent_daily_spend')
    .modify((q) => scoped(q, 'agent_id'))
    .select('agent_id', asText(db, 'day'), asText(db, 'amount'))) as {
    agent_id: string;
    day: string;
    amount: string;
  }[];
  const bucketOf = new Map(buckets.map((b) => [`${b.agent_id}:${b.day}`, toAmount(b.amount)]));
  for (const { agent_id: agent, day, total } of byDay) {
    const recorded = bucketOf.get(`${agent}:${day}`) ?? 0n;
    if (recorded !== toAmount(total)) {
      mismatches.push({
        wallet: `agent ${agent} day ${day}`,
        total: 'daily_spend',
        recorded,
        fromEntries: toAmount(total),
      });
    }
    bucketOf.delete(`${agent}:${day}`);
  }
  for (const [key, recorded] of bucketOf) {
    if (recorded !== 0n) mismatches.push({ wallet: key, total: 'daily_spend', recorded, fromEntries: 0n });
  }
  return { ok: mismatches.length === 0, mismatches, wallets: rows.length };
}
