import type { Knex } from 'knex';
import type { Database } from '../../../core/db/database.ts';
import type { HeldLease } from '../../../core/db/leased-pass.ts';
import type { Logger } from '../../../core/log.ts';
import type { PaymentRailV1 } from '@sigil/plugin-api';
import type { SettlementState } from './settlement-records.ts';

export interface Mismatch {
  id: string;
  problem: 'settled_not_on_chain' | 'on_chain_not_settled' | 'amount_differs';
  record?: { state: SettlementState; amount: string; transaction: string | null };
  chain?: { amount: string; transaction: string };
}

/** What a reconciliation found: records checked, settlements on chain, and every difference. */
export interface Reconciliation {
  checked: number;
  onChain: number;
  mismatches: Mismatch[];
}

/** A settlement record, as the comparison reads it. */
interface RecordRow {
  id: string;
  state: SettlementState;
  amount: string;
  transaction: string | null;
}

/** A record joined with the chain settlement of the same id. */
interface JoinedRow extends RecordRow {
  chain_amount: string;
  chain_transaction: string;
}

/**
 * Blocks read again by each reconciliation below the last one read: settlements a reorganization
 * moved or undid there are read as the chain now has them (Base's reorganizations are a few blocks).
 */
const REREAD_BLOCKS = 64n;
const CURSOR = 'settlements';
/** Rows per insert of chain settlements (SQLite binds at most 999 variables per statement). */
const INSERT_BATCH = 150;
/** Ids per `IN (…)` list, for the same reason. */
const ID_BATCH = 500;

/**
 * Compares the settlement records with the payments to `payTo` the chain holds, read incrementally
 * into payment_chain_settlements.
 */
export class Reconciler {
  constructor(private readonly deps: { rail: PaymentRailV1; db: Database; logger: Logger }) {}

  /**
   * Compares the records with the settlements the chain holds; every difference is reported. The chain
   * is read into the database first and the two are compared there, so memory holds the differences,
   * not the history. A record marked settled after the chain was read looks missing from it: those
   * differences are judged again after a second (incremental) reading, when their transfers, sent
   * before the mark, are on chain unless the chain lost them.
   *
   * Run under a lease (`held`: one replica's reconciliation of an interval), it stops once the lease
   * is lost, and what it read is stored only while the lease is held.
   */
  async reconcile(held?: HeldLease): Promise<Reconciliation> {
    await this.readChain(held);
    let missing = await this.settledNotOnChain();
    const others = await this.otherDifferences();
    if (missing.length > 0) {
      held?.signal.throwIfAborted();
      await this.readChain(held);
      missing = await this.settledNotOnChain(missing.map((mismatch) => mismatch.id));
    }
    const mismatches = [...missing, ...others];
    const count = async (query: Knex.QueryBuilder) =>
      Number(((await query.count({ n: '*' }).first()) as { n: number | string }).n);
    const { db } = this.deps;
    // The records of a replaced chain are history, never compared (chain-fence.ts).
    const checked = await count(db('payment_settlements').whereNull('chain_replaced_at'));
    const onChain = await count(db('payment_chain_settlements'));
    if (mismatches.length > 0) this.deps.logger.error({ mismatches }, 'payments: records and chain disagree');
    return { checked, onChain, mismatches };
  }

  /** Chain settlements whose record disagrees (amount, state) or is missing, as the database holds them now. */
  private async otherDifferences(): Promise<Mismatch[]> {
    const { db } = this.deps;
    const joined = () =>
      db('payment_chain_settlements as chain')
        .join('payment_settlements as record', 'record.id', 'chain.id')
        .whereNull('record.chain_replaced_at')
        .select(
          'record.id',
          'record.state',
          'record.amount',
          'record.transaction',
          'chain.amount as chain_amount',
          'chain.transaction as chain_transaction',
        )
        .orderBy('record.id');
    const notSettled = (await joined().whereNotIn('record.state', ['settled', 'settling'])) as JoinedRow[];
    const amountDiffers = (await joined()
      .whereIn('record.state', ['settled', 'settling'])
      .whereRaw('?? <> ??', ['chain.amount', 'record.amount'])) as JoinedRow[];
    const unrecorded = (await db('payment_chain_settlements as chain')
      .leftJoin('payment_settlements as record', 'record.id', 'chain.id')
      .whereNull('record.id')
      .select('chain.id', 'chain.amount', 'chain.transaction')
      .orderBy('chain.id')) as { id: string; amount: string; transaction: string }[];
    const withChain = (row: JoinedRow, problem: Mismatch['problem']): Mismatch => ({
      id: row.id,
      problem,
      record: { state: row.state, amount: row.amount, transaction: row.transaction },
      chain: { amount: row.chain_amount, transaction: row.chain_transaction },
    });
    return [
      ...notSettled.map((row) => withChain(row, 'on_chain_not_settled')),
      ...amountDiffers.map((row) => withChain(row, 'amount_differs')),
      ...unrecorded.map((settled) => ({
        id: settled.id,
        problem: 'on_chain_not_settled' as const,
        chain: { amount: settled.amount, transaction: settled.transaction },
      })),
    ];
  }

  /** Records marked settled that the stored chain settlements lack (only those of `ids`, when given). */
  private async settledNotOnChain(ids?: string[]): Promise<Mismatch[]> {
    const query = () =>
      this.deps
        .db('payment_settlements as record')
        .leftJoin('payment_chain_settlements as chain', 'chain.id', 'record.id')
        .where('record.state', 'settled')
        .whereNull('record.chain_replaced_at')
        .whereNull('chain.id')
        .select('record.id', 'record.state', 'record.amount', 'record.transaction')
        .orderBy('record.id');
    let rows: RecordRow[];
    if (ids === undefined) rows = (await query()) as RecordRow[];
    else {
      rows = [];
      // In slices: SQLite caps the variables of one statement.
      for (let at = 0; at < ids.length; at += ID_BATCH) {
        rows.push(...((await query().whereIn('record.id', ids.slice(at, at + ID_BATCH))) as RecordRow[]));
      }
    }
    return rows.map((row) => ({
      id: row.id,
      problem: 'settled_not_on_chain',
      record: { state: row.state, amount: row.amount, transaction: row.transaction },
    }));
  }

  /**
   * Brings the stored chain settlements up to date. With a rail that tells its newest block, only the
   * blocks since the last reading are read, from `REREAD_BLOCKS` back: a reorganization within that
   * depth drops what it undid, and a chain shorter than the last reading is read from block 0 again.
   * Without, the rail reads them all, every time, and they replace what was stored.
   */
  private async readChain(held: HeldLease | undefined): Promise<void> {
    const { rail, db } = this.deps;
    const latest = rail.latestBlock ? await rail.latestBlock() : undefined;
    const cursor = (await db('payment_chain_cursor').where({ name: CURSOR }).first()) as
      { scanned_to: number | string } | undefined;
    const scannedTo = cursor === undefined ? undefined : BigInt(cursor.scanned_to);
    // A chain now shorter than what was read is another chain (a dev chain started again) or a
    // reorganization deeper than REREAD_BLOCKS: read it all again.
    const from =
      latest === undefined || scannedTo === undefined || scannedTo < REREAD_BLOCKS || latest < scannedTo
        ? 0n
        : scannedTo - REREAD_BLOCKS;
    const found = await rail.settlementsOnChain(from);
    held?.signal.throwIfAborted();
    const store = (work: (trx: Knex.Transaction) => Promise<void>) =>
      held ? held.fenced(work) : db.transaction(work);
    await store(async (trx) => {
      await trx('payment_chain_settlements').where('block', '>=', from.toString()).delete();
      for (let at = 0; at < found.length; at += INSERT_BATCH) {
        await trx('payment_chain_settlements')
          .insert(
            found.slice(at, at + INSERT_BATCH).map((settlement) => ({
              id: settlement.id,
              payer: settlement.payer,
              amount: settlement.amount.toString(),
              transaction: settlement.transaction,
              block: settlement.block.toString(),
            })),
          )
          .onConflict('id')
          .merge();
      }
      if (latest === undefined) return;
      await trx('payment_chain_cursor')
        .insert({ name: CURSOR, scanned_to: latest.toString() })
        .onConflict('name')
        .merge();
    });
  }
}
