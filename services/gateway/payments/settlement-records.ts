import type { PaymentRailV1, VerifiedPayment } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';
import type { Logger } from '../../../core/log.ts';

/** What the parts of the payment path share: the rail, the database of the records, time and the log. */
export interface PaymentServices {
  rail: PaymentRailV1;
  db: Database;
  clock: Clock;
  logger: Logger;
}

/**
 * A payment's life, one row per authorization: `executing` (verified and reserved: the call runs) →
 * `settling` (the call succeeded; the money is moving) → `settled`; or `released` (the call failed or
 * never finished: no charge), or `failed` (the call succeeded but the payment can no longer settle).
 */
export type SettlementState = 'executing' | 'settling' | 'settled' | 'released' | 'failed';

/** A row of payment_settlements. */
export interface SettlementRow {
  id: string;
  state: SettlementState;
  payer: string;
  amount: string;
  resource: string;
  wallet: string | null;
  authorization: string;
  valid_before: number | string;
  transaction: string | null;
  reason: string | null;
  attempts: number;
  next_attempt_at: number | string;
  /** The replica running the call (`executing`) or settling it (`settling`), or null. */
  claimed_by?: string | null;
  created_at: number | string;
  updated_at: number | string;
  /** The call's result (JSON), kept for its payer from the settlement's start until `result_expires_at`. */
  result?: string | null;
  result_bytes?: number | null;
  result_expires_at?: number | string | null;
}

/** The columns a settlement attempt needs (not the kept result, which may be large). */
export const SETTLEMENT_COLUMNS = [
  'id',
  'state',
  'payer',
  'amount',
  'authorization',
  'valid_before',
  'attempts',
  'next_attempt_at',
] as const;

export type SettlementAttemptRow = Pick<SettlementRow, (typeof SETTLEMENT_COLUMNS)[number]>;

/** The payment a record was reserved for. */
export function paymentOf(row: SettlementAttemptRow): VerifiedPayment {
  return {
    id: row.id,
    payer: row.payer,
    amount: BigInt(row.amount),
    validBefore: Number(row.valid_before),
    authorization: JSON.parse(row.authorization) as Record<string, unknown>,
  };
}

/** Writes `change` to the record of payment `id` if it is in one of the `from` states; the rows changed (0 or 1). */
export function moveSettlement(
  deps: { db: Database; clock: Clock },
  id: string,
  from: readonly SettlementState[],
  change: Partial<Omit<SettlementRow, 'id'>>,
): Promise<number> {
  return deps
    .db('payment_settlements')
    .where({ id })
    .whereIn('state', from)
    .update({ ...change, updated_at: deps.clock.now().getTime() });
}

/** The most `settled` marks written in one statement (two bindings each). */
const MARKS_PER_STATEMENT = 500;

/**
 * `settled` marks of settlements whose answers have left (the chain holds each transfer and each
 * record says `settling`): those asked for in one turn of the event loop are written together, one
 * UPDATE for all (each record's transaction by a CASE on its id), under the same condition as one
 * mark alone (the record still `settling`). At 200 paid calls in flight the marks of a mined block
 * then cost one statement, not one each.
 */
export class SettledMarks {
  private pending: { id: string; transaction: string; resolve(): void; reject(err: unknown): void }[] = [];

  constructor(
    private readonly deps: { db: Database; clock: Clock },
    /** The attempts these settlements took (the first attempt's marks: 1). */
    private readonly attempts: number,
  ) {}

  /** Marks `id` settled by `transaction`; resolves once written (or found no longer `settling`). */
  mark(id: string, transaction: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.pending.push({ id, transaction, resolve, reject });
      if (this.pending.length === 1) setImmediate(() => void this.flush());
    });
  }

  private async flush(): Promise<void> {
    const all = this.pending;
    this.pending = [];
    for (let start = 0; start < all.length; start += MARKS_PER_STATEMENT) {
      const batch = all.slice(start, start + MARKS_PER_STATEMENT);
      try {
        await this.write(batch);
        for (const mark of batch) mark.resolve();
      } catch (err) {
        for (const mark of batch) mark.reject(err);
      }
    }
  }

  private async write(batch: readonly { id: string; transaction: string }[]): Promise<void> {
    const { db, clock } = this.deps;
    const first = batch[0];
    if (batch.length === 1 && first) {
      await moveSettlement(this.deps, first.id, ['settling'], {
        state: 'settled',
        transaction: first.transaction,
        attempts: this.attempts,
        reason: null,
      });
      return;
    }
    const cases = batch.map(() => 'when ? then ?').join(' ');
    await db('payment_settlements')
      .whereIn(
        'id',
        batch.map((mark) => mark.id),
      )
      .where({ state: 'settling' })
      .update({
        state: 'settled',
        transaction: db.raw(`case ?? ${cases} end`, [
          'id',
          ...batch.flatMap((mark) => [mark.id, mark.transaction]),
        ]),
        attempts: this.attempts,
        reason: null,
        updated_at: clock.now().getTime(),
      });
  }
}
