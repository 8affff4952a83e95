import type { Clock } from '../../../core/clock.ts';
import { hkdfSha256, openAesGcm, sealAesGcm, type SealedBox } from '../../../core/crypto.ts';
import type { Knex } from 'knex';
import type { Database } from '../../../core/db/database.ts';
import { SigilError } from '@sigil/plugin-api';
import type { Logger } from '../../../core/log.ts';
import type { PaymentReceipt } from './receipts.ts';
import type { SettlementState } from './settlement-records.ts';

/** How long a paid result is kept for its payer by default: a day. */
export const DEFAULT_RESULT_RETENTION_MS = 24 * 3_600_000;
/**
 * The largest result (serialized, in bytes) kept for its payer by default: a bigger one is served
 * once, as it leaves, and not kept, so a tool's output cannot grow the settlement table without bound.
 */
export const DEFAULT_RESULT_MAX_BYTES = 256 * 1024;
/**
 * The bytes of unexpired results kept per payer by default: one payer paying for many large results
 * cannot fill the database (a busy payer's further results are served, not kept).
 */
export const DEFAULT_RESULT_MAX_BYTES_PER_PAYER = 16 * 1024 * 1024;

/**
 * When the payer of a result still settling is told to ask again (`Retry-After`): the retry worker
 * tries each second, and a settlement a dead replica left waits for that replica to be taken for dead.
 */
export const SETTLING_RETRY_AFTER_SECONDS = 2;

/** Why a paid result was not kept, as its receipt says. */
export type NotKeptReason = 'result_too_large' | 'payer_quota_full';

/**
 * A result ready to be kept with its settlement's `settling` mark, which keeps it only if the payer's
 * unexpired results leave room for it then (see `keptIfRoom`): the quota is read by that write itself,
 * not by a round trip of its own before it.
 */
export interface ResultToKeep {
  payer: string;
  /** The result as stored: its JSON, sealed when a data key is configured. */
  stored: string;
  bytes: number;
  /** When it is kept (the payer's results expired by then hold no room). */
  now: number;
  expiresAt: number;
}

/** The CTE of the settling mark that says whether a payer's quota has room for the result. */
const KEPT_ROOM = 'kept_result_room';

/** How often, at most, kept results past their retention are deleted. */
const RESULT_SWEEP_MS = 60_000;

/** A sealed result is stored as this prefix and the box's JSON; plain JSON never starts with a letter. */
const SEALED_PREFIX = 'aes-256-gcm:';

/**
 * The results of paid calls kept for their payers: serialized, capped (per result and per payer),
 * sealed with AES-256-GCM under the data key (`database.dataKey`, SIGIL_DATA_KEY) when one is
 * configured, each box bound to its payment id so it opens in no other row.
 */
export class PaidResults {
  private readonly sealingKey: Buffer | undefined;
  /** When the worker next deletes the kept results past their retention (by the injected clock). */
  private nextSweepAt = 0;

  constructor(
    private readonly deps: {
      db: Database;
      clock: Clock;
      logger: Logger;
      /** From the start of the settlement; 0 keeps none. */
      retentionMs: number;
      maxBytes: number;
      maxBytesPerPayer: number;
      dataKey: string | undefined;
    },
  ) {
    this.sealingKey =
      deps.dataKey === undefined
        ? undefined
        : hkdfSha256(deps.dataKey, 'sigil:payment_settlements', 'sigil:data-key:paid-results');
  }

  /**
   * `result` of payment `id`, serialized and sealed, to be kept with its settling mark (`keptIfRoom`),
   * or none and why not (too large, or nothing to keep: no result, or a retention of 0).
   */
  prepare(id: string, payer: string, result: unknown): { toKeep?: ResultToKeep; notKept?: NotKeptReason } {
    const { retentionMs, maxBytes } = this.deps;
    if (result === undefined || retentionMs === 0) return {};
    const serialized = JSON.stringify(result);
    const bytes = Buffer.byteLength(serialized, 'utf8');
    if (bytes > maxBytes) return { notKept: 'result_too_large' };
    const now = this.deps.clock.now().getTime();
    return { toKeep: { payer, stored: this.seal(id, serialized), bytes, now, expiresAt: now + retentionMs } };
  }

  /**
   * The columns of an update that keep `toKeep` if its payer's unexpired results leave room for it,
   * and write nulls otherwise: the room is read in the same statement (the `room` CTE the update must
   * be given with `.with(...keptIfRoom.room)`). Concurrent calls of one payer may each find room: the
   * quota is bounded by the call limits, as it was with a read before the write.
   */
  keptIfRoom(toKeep: ResultToKeep): {
    room: [string, Knex.QueryBuilder];
    columns: Record<'result' | 'result_bytes' | 'result_expires_at', Knex.Raw>;
  } {
    const { db, maxBytesPerPayer } = this.deps;
    const room = db('payment_settlements')
      .where({ payer: toKeep.payer })
      .andWhere('result_expires_at', '>', toKeep.now)
      .select(db.raw('coalesce(sum(result_bytes), 0) + ? <= ? as fits', [toKeep.bytes, maxBytesPerPayer]));
    const ifRoom = (value: string | number, type: string) =>
      db.raw(`case when (select fits from ${KEPT_ROOM}) then cast(? as ${type}) end`, [value]);
    return {
      room: [KEPT_ROOM, room],
      columns: {
        result: ifRoom(toKeep.stored, 'text'),
        result_bytes: ifRoom(toKeep.bytes, 'integer'),
        result_expires_at: ifRoom(toKeep.expiresAt, 'bigint'),
      },
    };
  }

  /**
   * The result of a settled call on `network`, for its payer only (`caller`: the authenticated wallet,
   * compared with the payer of the payment), while it is kept. 404 for anyone else, for an unknown,
   * unpaid or expired payment alike (nothing says which); 409 to the payer while the settlement is
   * under way.
   */
  async fetch(
    id: string,
    caller: string,
    network: string,
  ): Promise<{ result: unknown; receipt: PaymentReceipt }> {
    const now = this.deps.clock.now().getTime();
    const row = (await this.deps
      .db('payment_settlements')
      .select('state', 'payer', 'transaction', 'result')
      .where({ id })
      .whereNotNull('result')
      .andWhere('result_expires_at', '>', now)
      .first()) as
      { state: SettlementState; payer: string; transaction: string | null; result: string } | undefined;
    const mine = row !== undefined && row.payer.toLowerCase() === caller.toLowerCase();
    if (!mine || (row.state !== 'settled' && row.state !== 'settling')) {
      throw new SigilError('not_found', 'No paid result of yours is kept under this payment id', {
        hint: 'Results are kept for the payer only (sign in with the paying wallet), for a limited time',
      });
    }
    if (row.state === 'settling') {
      throw new SigilError(
        'conflict',
        'The payment is still being settled; its result is served once it is',
        {
          hint: `Ask again in ${SETTLING_RETRY_AFTER_SECONDS} seconds`,
          details: { state: row.state, retryAfterSeconds: SETTLING_RETRY_AFTER_SECONDS },
          headers: { 'Retry-After': String(SETTLING_RETRY_AFTER_SECONDS) },
        },
      );
    }
    return {
      result: this.open(id, row.result),
      receipt: { success: true, transaction: row.transaction ?? '', network, payer: row.payer },
    };
  }

  /** Deletes the kept results past their retention, at most once per RESULT_SWEEP_MS. */
  async forgetExpired(): Promise<void> {
    const now = this.deps.clock.now().getTime();
    if (now < this.nextSweepAt) return;
    this.nextSweepAt = now + RESULT_SWEEP_MS;
    const forgotten = await this.deps
      .db('payment_settlements')
      .where('result_expires_at', '<=', now)
      .update({ result: null, result_bytes: null, result_expires_at: null });
    if (forgotten > 0)
      this.deps.logger.debug({ forgotten }, 'payments: deleted paid results past their retention');
  }

  /** The result as it was kept: opened with the data key when it was sealed. */
  private open(id: string, stored: string): unknown {
    if (!stored.startsWith(SEALED_PREFIX)) return JSON.parse(stored) as unknown;
    if (this.sealingKey === undefined) {
      throw new SigilError('unavailable', 'The kept result is sealed, and no data key is configured', {
        hint: 'Set SIGIL_DATA_KEY (database.dataKey) to the data key it was sealed with',
      });
    }
    const box = JSON.parse(stored.slice(SEALED_PREFIX.length)) as SealedBox;
    return JSON.parse(openAesGcm(this.sealingKey, box, aadOf(id))) as unknown;
  }

  private seal(id: string, serialized: string): string {
    if (this.sealingKey === undefined) return serialized;
    return SEALED_PREFIX + JSON.stringify(sealAesGcm(this.sealingKey, serialized, aadOf(id)));
  }
}

/** Binds a sealed result to its record: a box copied into another row does not open. */
const aadOf = (id: string): string => `sigil:payment_settlements:result:${id}`;
