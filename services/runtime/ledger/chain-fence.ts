import { readChainIdentity } from '@sigil/plugin-api/chain';
import {
  chainIdentityOf,
  compareWithRecorded,
  describeChain,
  recordChain,
  recordedChain,
  type ChainIdentity,
} from '../../../core/chain/identity.ts';
import type { Database } from '../../../core/db/database.ts';
import type { Logger } from '../../../core/log.ts';
import { toAmount } from './amounts.ts';
import type { LedgerChain } from './chain.ts';
import type { Ledger } from './ledger.ts';
import type { Transfers } from './transfers.ts';

/** The ledger's row in `chain_identities`. */
const IDENTITY = 'ledger';

export interface ChainFenceOutcome {
  verdict: 'same' | 'first' | 'replaced';
  /** When replaced: open withdrawals and sweeps failed, wallets whose unsettled spend was written off. */
  failedTransfers?: number;
  writtenOff?: number;
}

/**
 * Start-up check that the chain the ledger reads is the one its records describe. On another chain
 * (a dev chain started without its saved state, or other settings), what the ledger derived from the
 * old one is fenced before anything reads the new one:
 *  - open withdrawals and sweeps fail (their authorizations were for the old chain's token; a
 *    withdrawal's held funds are released);
 *  - unsettled spend is written off (a `chain_replaced` entry): it could only be swept from deposits on
 *    the old chain, and counting it against the new chain's balance is how `available` went negative;
 *  - cached balances and the watcher's cursor are cleared, so every balance is read again from the new
 *    chain (a cursor beyond the new chain's head would otherwise keep the old balance for good).
 * Entries stay: deposits and charges are history. Each step is idempotent and the new identity is
 * recorded last, so a start-up interrupted here repeats the fence.
 *
 * A database with no identity recorded (written before identities were) counts as another chain's
 * when its watcher cursor is beyond the chain's head.
 */
export async function fenceReplacedChain(deps: {
  db: Database;
  ledger: Ledger;
  transfers: Transfers;
  chain: LedgerChain;
  logger: Logger;
}): Promise<ChainFenceOutcome> {
  const { db, ledger, chain, logger } = deps;
  const current = await chainIdentityOf(await readChainIdentity(chain.publicClient, chain.token));
  const compared = await compareWithRecorded(db, IDENTITY, current);
  const { recorded } = compared;
  let { verdict } = compared;
  if (verdict === 'first' && (await cursorBeyondHead(db, (await chain.head()).latest))) verdict = 'replaced';
  if (verdict === 'same') return { verdict };
  if (verdict === 'first') {
    await recordChain(db, IDENTITY, current, ledger.now());
    return { verdict };
  }
  const outcome = await fence(deps, current);
  await recordChain(db, IDENTITY, current, ledger.now());
  logger.warn(
    {
      previous: recorded ? describeChain(recorded) : 'unrecorded (its cursor is beyond this chain’s head)',
      current: describeChain(current),
      ...outcome,
    },
    'ledger: the chain is not the one the ledger recorded; open withdrawals and sweeps of the old chain failed, its unsettled spend was written off (chain_replaced entries), and balances are read again from this chain',
  );
  return { verdict, ...outcome };
}

async function fence(
  deps: { db: Database; ledger: Ledger; transfers: Transfers },
  current: ChainIdentity,
): Promise<{ failedTransfers: number; writtenOff: number }> {
  const { db, ledger, transfers } = deps;
  let failedTransfers = 0;
  for (const transfer of await transfers.open()) {
    if (await transfers.fail(transfer.id, 'chain_replaced: the chain this transfer was for was replaced'))
      failedTransfers += 1;
  }
  const owing = (await db('ledger_wallets').where('unsettled_spend', '>', 0).select('wallet')) as {
    wallet: string;
  }[];
  let writtenOff = 0;
  for (const { wallet } of owing) {
    const entry = await ledger.withWallet(wallet, (trx, balance) =>
      balance.unsettledSpend > 0n
        ? ledger.append(trx, {
            wallet,
            kind: 'chain_replaced',
            amount: balance.unsettledSpend,
            // One write-off per wallet and new chain, however often the fence runs.
            idempotencyKey: `chain_replaced:${current.genesisHash}`,
          })
        : Promise.resolve(undefined),
    );
    if (entry) writtenOff += 1;
  }
  await db('ledger_wallets').update({
    on_chain_balance: '0',
    balance_block: '0',
    balance_updated_at: 0,
    updated_at: ledger.now(),
  });
  await db('ledger_chain_cursor').delete();
  return { failedTransfers, writtenOff };
}

async function cursorBeyondHead(db: Database, head: bigint): Promise<boolean> {
  const row = (await db('ledger_chain_cursor').max({ block: 'block' }).first()) as
    { block: string | number | null } | undefined;
  return row?.block !== null && row?.block !== undefined && toAmount(String(row.block)) > head;
}

/**
 * Start-up without a chain (`DEV_CHAIN=false`, no ledger.rpcUrl) after the ledger has read one: the
 * balances cached from it are cleared, since nothing keeps them true any more. Nothing else changes,
 * and the identity stays recorded: back on the same chain, the watcher's first pass reads every
 * balance again and the ledger carries on.
 */
export async function clearBalancesOfAbsentChain(deps: {
  db: Database;
  ledger: Ledger;
  logger: Logger;
}): Promise<number> {
  const { db, ledger, logger } = deps;
  const recorded = await recordedChain(db, IDENTITY);
  if (!recorded) return 0;
  const cleared = await db('ledger_wallets')
    .where('balance_updated_at', '>', 0)
    .update({ on_chain_balance: '0', balance_block: '0', balance_updated_at: 0, updated_at: ledger.now() });
  if (cleared > 0)
    logger.warn(
      { chain: describeChain(recorded), wallets: cleared },
      'ledger: no chain configured; balances read from the last chain are no longer shown (read again when it is back)',
    );
  return cleared;
}
