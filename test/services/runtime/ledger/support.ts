import { expect } from 'chai';
import { getAddress } from 'viem';
import { ManualClock } from '../../../../core/clock.ts';
import { dialectOf, type Database } from '../../../../core/db/database.ts';
import type { Kernel } from '../../../../services/kernel.ts';
import { createLedgerService, type LedgerService } from '../../../../services/runtime/ledger/service.ts';
import type { Ledger } from '../../../../services/runtime/ledger/ledger.ts';
import { OPEN_STATES } from '../../../../services/runtime/ledger/transfer-records.ts';
import { openTestKernel, type ConfigOverrides, type TestDatabase } from '../../../support/kernel.ts';
import { eventually } from '../../../support/eventually.ts';
export { eventually };

/** Wednesday 2026-03-18 12:00:00 UTC: far from every window boundary unless a test moves it. */
export const MIDWEEK = Date.UTC(2026, 2, 18, 12, 0, 0);

export interface LedgerWorld {
  kernel: Kernel;
  clock: ManualClock;
  service: LedgerService;
  ledger: Ledger;
  close(): Promise<void>;
}

/** A real kernel on a fresh database with the ledger service (no chain, no background work). */
export async function openLedgerWorld(
  database: TestDatabase,
  options: { config?: ConfigOverrides; clock?: ManualClock } = {},
): Promise<LedgerWorld> {
  const clock = options.clock ?? new ManualClock(MIDWEEK);
  const kernel = await openTestKernel({
    database,
    clock,
    ...(options.config ? { config: options.config } : {}),
  });
  const service = await createLedgerService(kernel);
  return {
    kernel,
    clock,
    service,
    ledger: service.ledger,
    close: async () => {
      await service.close();
      await kernel.close();
    },
  };
}

/** Every open transfer due now, whatever its claim or backoff: a test's retry without the wait. */
export async function transfersDueNow(world: LedgerWorld): Promise<void> {
  await world.kernel
    .db('ledger_transfers')
    .whereIn('state', OPEN_STATES)
    .update({ next_attempt_at: 0, claimed_by: null });
}

let nextBlock = 1n;

/** Sets a wallet's confirmed on-chain balance as the watcher would, at a block newer than any before. */
export async function setOnChain(ledger: Ledger, wallet: string, balance: bigint): Promise<void> {
  nextBlock += 1n;
  expect(await ledger.recordOnChainBalance(wallet, balance, nextBlock)).to.equal(true);
}

/** A fresh random wallet address (checksummed). */
export function randomWallet(): `0x${string}` {
  const hex = Array.from({ length: 40 }, () => Math.floor(Math.random() * 16).toString(16)).join('');
  return getAddress(`0x${hex}`);
}

/** A seeded PRNG (mulberry32): the property test replays any failing seed exactly. */
export function seededRandom(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * A real database fault for `wallet`: every charge entry it would get is refused by a trigger (the
 * transaction fails and rolls back) until `heal` drops the trigger.
 */
export async function refuseCharges(db: Database, wallet: string): Promise<{ heal(): Promise<void> }> {
  const address = getAddress(wallet);
  if (dialectOf(db) === 'postgres') {
    await db.raw(`create function refuse_charge() returns trigger language plpgsql as $$
      begin raise exception 'injected fault: no charge for this wallet'; end $$`);
    await db.raw(`create trigger refuse_charge before insert on ledger_entries for each row
      when (new.wallet = '${address}' and new.kind = 'charge') execute function refuse_charge()`);
    return {
      heal: async () => {
        await db.raw('drop trigger refuse_charge on ledger_entries');
        await db.raw('drop function refuse_charge()');
      },
    };
  }
  await db.raw(`create trigger refuse_charge before insert on ledger_entries
    when new.wallet = '${address}' and new.kind = 'charge'
    begin select raise(abort, 'injected fault: no charge for this wallet'); end`);
  return { heal: async () => void (await db.raw('drop trigger refuse_charge')) };
}
