import type { Clock } from '../../../core/clock.ts';
import {
  chainIdentityOf,
  compareWithRecorded,
  describeChain,
  recordChain,
} from '../../../core/chain/identity.ts';
import type { Database } from '../../../core/db/database.ts';
import type { Logger } from '../../../core/log.ts';
import type { PaymentRailV1 } from '@sigil/plugin-api';

/** The payments' row in `chain_identities`. */
const IDENTITY = 'payments';
const REASON = 'chain_replaced: the chain this payment was for was replaced';

/**
 * Start-up check that the chain the rail settles on is the one the payment records describe (for a
 * rail that tells its chain's identity). On another chain (a dev chain started without its saved
 * state), the old chain's records are fenced before anything settles or reconciles:
 *  - calls left `executing` are released and settlements left `settling` fail (their authorizations
 *    were signed for the old chain, where nothing can settle any more), never charged;
 *  - every record of the old chain is marked `chain_replaced_at`: it stays as history (a kept result
 *    can still be fetched), but the reconciler compares only the current chain's records with it;
 *  - the settlements read from the old chain are dropped, so the new chain is read from its start.
 * The new identity is recorded last, so a start-up interrupted here repeats the fence.
 *
 * A database with no identity recorded (written before identities were) counts as another chain's
 * when its reconciliation cursor is beyond the chain's head.
 */
export async function fencePaymentsOfReplacedChain(deps: {
  rail: PaymentRailV1;
  db: Database;
  clock: Clock;
  logger: Logger;
}): Promise<'same' | 'first' | 'replaced' | 'unknown'> {
  const { rail, db, clock, logger } = deps;
  if (!rail.chainIdentity) return 'unknown';
  const current = await chainIdentityOf(await rail.chainIdentity());
  const compared = await compareWithRecorded(db, IDENTITY, current);
  const { recorded } = compared;
  let { verdict } = compared;
  if (verdict === 'first' && rail.latestBlock && (await cursorBeyond(db, await rail.latestBlock())))
    verdict = 'replaced';
  if (verdict === 'same') return verdict;
  const now = clock.now().getTime();
  if (verdict === 'replaced') {
    const fenced = await db.transaction(async (trx) => {
      const released = await trx('payment_settlements')
        .where({ state: 'executing' })
        .whereNull('chain_replaced_at')
        .update({ state: 'released', reason: REASON, updated_at: now });
      const failed = await trx('payment_settlements')
        .where({ state: 'settling' })
        .whereNull('chain_replaced_at')
        .update({
          state: 'failed',
          reason: REASON,
          result: null,
          result_bytes: null,
          result_expires_at: null,
          updated_at: now,
        });
      const records = await trx('payment_settlements')
        .whereNull('chain_replaced_at')
        .update({ chain_replaced_at: now });
      await trx('payment_chain_settlements').delete();
      await trx('payment_chain_cursor').delete();
      return { released, failed, records };
    });
    logger.warn(
      {
        previous: recorded ? describeChain(recorded) : 'unrecorded (its cursor is beyond this chain’s head)',
        current: describeChain(current),
        ...fenced,
      },
      'payments: the chain is not the one the payment records describe; the old chain’s unfinished payments were released or failed (never charged), and its records are kept as history but no longer reconciled',
    );
  }
  await recordChain(db, IDENTITY, current, now);
  return verdict;
}

async function cursorBeyond(db: Database, head: bigint): Promise<boolean> {
  const row = (await db('payment_chain_cursor').max({ block: 'scanned_to' }).first()) as
    { block: string | number | null } | undefined;
  return row?.block !== null && row?.block !== undefined && BigInt(row.block) > head;
}
