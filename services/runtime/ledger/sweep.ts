import type { Address } from 'viem';
import type { Database } from '../../../core/db/database.ts';
import type { Logger } from '../../../core/log.ts';
import type { LedgerChain } from './chain.ts';
import type { DepositAddresses } from './deposits.ts';
import { PeriodicPass } from '../../../core/periodic.ts';
import type { TransferWorker } from './transfer-worker.ts';
import type { Transfer } from './transfer-records.ts';
import type { Transfers } from './transfers.ts';

/**
 * The settlement sweep: for each wallet whose unsettled spend (not already being swept) reaches
 * `minimumAmount`, a transfer of exactly that amount from its deposit address to the treasury is
 * recorded, and the transfer worker moves it like a withdrawal (signed by the deposit key, submitted
 * and paid for by the operator). When it completes, the amount turns from unsettled into settled spend
 * in the same transaction that records the deposit address's lower balance, so `available` does not
 * move; a sweep that fails changes no entry, and the next sweep takes the spend again.
 */
export class Sweeper {
  private readonly periodic: PeriodicPass<Transfer[]>;

  constructor(
    private readonly deps: {
      db: Database;
      transfers: Transfers;
      deposits: DepositAddresses;
      chain: LedgerChain;
      worker: TransferWorker;
      treasury: Address;
      minimumAmount: bigint;
      ttlSeconds: number;
      intervalMs: number;
      logger: Logger;
    },
  ) {
    this.periodic = new PeriodicPass({
      pass: () => this.pass(),
      intervalMs: deps.intervalMs,
      logger: deps.logger,
      failure: 'ledger: settlement sweep failed; retrying at the next',
    });
  }

  /** One sweep of every wallet with enough unsettled spend; resolves with the sweeps it opened. */
  sweep(): Promise<Transfer[]> {
    return this.periodic.run();
  }

  start(): void {
    this.periodic.start();
  }

  stop(): Promise<void> {
    return this.periodic.stop();
  }

  private async pass(): Promise<Transfer[]> {
    const { db, chain, transfers, deposits, logger } = this.deps;
    const minimum = this.deps.minimumAmount > 0n ? this.deps.minimumAmount : 1n;
    const wallets = (await db('ledger_wallets')
      .where('unsettled_spend', '>=', minimum.toString())
      .orderBy('wallet')
      .pluck('wallet')) as string[];
    if (wallets.length === 0) return [];
    const { latest } = await chain.head();
    const head = { block: latest, timestamp: await chain.blockTimestamp(latest) };
    const opened: Transfer[] = [];
    for (const wallet of wallets) {
      const deposit = await deposits.of(wallet);
      const sweep = await transfers.openSweep({
        wallet,
        from: deposit.address,
        treasury: this.deps.treasury,
        minimumAmount: minimum,
        ttlSeconds: this.deps.ttlSeconds,
        head,
      });
      if (sweep) opened.push(sweep);
    }
    if (opened.length > 0) {
      const total = opened.reduce((sum, sweep) => sum + sweep.amount, 0n);
      logger.info({ sweeps: opened.length, amount: total.toString() }, 'ledger: settlement sweep opened');
      this.deps.worker.kick();
    }
    return opened;
  }
}
