import type { Address } from 'viem';
import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';
import { LeasedPass, type JobLeases } from '../../../core/db/leased-pass.ts';
import type { Logger } from '../../../core/log.ts';
import { SinglePass } from '../../../core/periodic.ts';
import type { LedgerChain } from './chain.ts';
import type { DepositAddresses } from './deposits.ts';
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
 *
 * Timed sweeps run on one replica per interval (a LeasedPass, `ledger:sweep:<interval>`): an amount is
 * swept once whichever replica opens it (under the wallet's lock), so the lease only spares the
 * others the chain's head and the database's pass.
 */
export class Sweeper {
  private readonly single: SinglePass<Transfer[]>;
  private readonly schedule: LeasedPass;

  constructor(
    private readonly deps: JobLeases & {
      db: Database;
      transfers: Transfers;
      deposits: DepositAddresses;
      chain: LedgerChain;
      worker: TransferWorker;
      treasury: Address;
      minimumAmount: bigint;
      ttlSeconds: number;
      intervalMs: number;
      clock: Clock;
      logger: Logger;
    },
  ) {
    this.single = new SinglePass(() => this.pass());
    this.schedule = new LeasedPass({
      leases: deps.leases,
      holder: deps.holder,
      leaseMs: deps.leaseMs,
      name: 'ledger:sweep',
      job: () => this.sweep(),
      intervalMs: deps.intervalMs,
      clock: deps.clock,
      logger: deps.logger,
      failure: 'ledger: settlement sweep failed; retrying at the next',
    });
  }

  /** One sweep now, on this replica, of every wallet with enough unsettled spend; resolves with the sweeps it opened. */
  sweep(): Promise<Transfer[]> {
    return this.single.run();
  }

  /** Sweeps if this interval's sweep is due and no replica has taken it: true when it ran here. */
  sweepDue(): Promise<boolean> {
    return this.schedule.runDue();
  }

  start(): void {
    this.schedule.start();
  }

  async stop(): Promise<void> {
    await this.schedule.stop();
    await this.single.settled();
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
