import { KeptLease } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';
import { LeasedPass, type JobLeases } from '../../../core/db/leased-pass.ts';
import type { Logger } from '../../../core/log.ts';
import type { LedgerChain } from './chain.ts';
import type { DepositAddresses } from './deposits.ts';
import type { Ledger } from './ledger.ts';

export interface WatchReport {
  /** The confirmed block the balances were read at; undefined when the chain has none yet. */
  confirmedBlock: bigint | undefined;
  /** Wallets whose cached balance was read again. */
  refreshed: number;
  /** Incoming transfers recorded in the history. */
  deposits: number;
}

/**
 * Keeps each wallet's `onChainBalance` a confirmed balance of its deposit address. Each poll takes the
 * newest block with `confirmations` confirmations, reads the token's Transfer events to or from
 * deposit addresses since the last poll (the cursor lives in the database, so a restart resumes), and
 * reads balanceOf at that block for each address a transfer touched. A full refresh reads every
 * deposit address, which also catches anything the events missed: a process's first poll (what
 * changed while it did not watch: a start without a chain clears the balances), and one replica's
 * every `refreshMs` (a LeasedPass, `ledger:refresh:<interval>`). A balance read at an older block
 * never replaces a newer one, so replicas may poll at once.
 *
 * The poll every `pollMs` runs on one replica: the one keeping the watch's lease (`ledger:watch:
 * <chain>:<token>`, a KeptLease). A lease per poll would insert and delete a row every 2 s for a
 * pass that is itself cheap; polls on every replica would multiply the chain's calls (head, logs)
 * with the replicas. The others try to take the lease at each of their ticks (one statement, no
 * chain call), and one takes it over once its holder stopped (at once), died (once the replica is
 * seen dead) or could not renew it (once it expired).
 */
export class BalanceWatcher {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<WatchReport> | undefined;
  private everyAddressRead = false;
  private readonly watch: KeptLease;
  private readonly refresh: LeasedPass;

  constructor(
    private readonly deps: JobLeases & {
      db: Database;
      ledger: Ledger;
      deposits: DepositAddresses;
      chain: LedgerChain;
      logger: Logger;
      /** What the full refresh's intervals and the cursor's `updated_at` are timed by. */
      clock: Clock;
      pollMs: number;
      refreshMs: number;
    },
  ) {
    const { chain, logger } = deps;
    this.watch = new KeptLease(deps.leases, {
      names: [`ledger:watch:${chain.options.chainId}:${chain.token.toLowerCase()}`],
      ttlMs: deps.leaseMs,
      changed: (now) =>
        logger.info(
          now
            ? 'ledger: this replica polls the deposit addresses (it holds the watch)'
            : 'ledger: another replica polls the deposit addresses (it holds the watch)',
        ),
      failed: (err) =>
        logger.warn({ err: (err as Error).message }, 'ledger: the deposit watch’s lease could not be kept'),
    });
    this.refresh = new LeasedPass({
      leases: deps.leases,
      holder: deps.holder,
      leaseMs: deps.leaseMs,
      name: 'ledger:refresh',
      job: () => this.poll({ fullRefresh: true }),
      intervalMs: deps.refreshMs,
      clock: deps.clock,
      logger,
      failure: 'ledger: the full balance refresh failed; retrying at the next',
    });
  }

  private get cursorName(): string {
    return `transfers:${this.deps.chain.options.chainId}:${this.deps.chain.token.toLowerCase()}`;
  }

  /**
   * One pass now, whichever replica watches (polls never overlap in a process: a second call waits
   * for the running one).
   */
  poll(options: { fullRefresh?: boolean } = {}): Promise<WatchReport> {
    const pass = (this.running ?? Promise.resolve()).then(
      () => this.pass(options),
      () => this.pass(options),
    );
    this.running = pass;
    return pass;
  }

  /** One pass if this replica holds the watch (or takes it now, free); undefined when another does. */
  async pollIfWatching(): Promise<WatchReport | undefined> {
    return (await this.watch.ensure()) ? this.poll() : undefined;
  }

  /** The full refresh, if this interval's is due and no replica has taken it: true when it ran here. */
  refreshDue(): Promise<boolean> {
    return this.refresh.runDue();
  }

  /**
   * Takes the watch if it is free and then polls at once (a first start sets the cursor, so deposits
   * from then on are in the history), then every pollMs while it holds the watch.
   */
  async start(): Promise<void> {
    if (this.timer) return;
    const tick = () =>
      this.pollIfWatching().catch((err: unknown) =>
        this.deps.logger.warn(
          { err: (err as Error).message },
          'ledger: balance watcher poll failed; retrying',
        ),
      );
    this.timer = setInterval(tick, this.deps.pollMs);
    this.timer.unref();
    await this.watch.start();
    void tick();
    this.refresh.start();
  }

  /** Stops polling and gives the watch up, so another replica takes it at its next tick. */
  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.refresh.stop();
    await this.running?.catch(() => undefined);
    await this.watch.stop();
  }

  private async pass(options: { fullRefresh?: boolean }): Promise<WatchReport> {
    const { chain, ledger, deposits, logger } = this.deps;
    const { confirmed } = await chain.head();
    if (confirmed < 0n) return { confirmedBlock: undefined, refreshed: 0, deposits: 0 };
    const addresses = await deposits.all(true);
    const cursor = await this.readCursor();
    const dirty = new Set<string>();
    let recorded = 0;
    if (cursor !== undefined && confirmed > cursor && addresses.length > 0) {
      const byAddress = new Map(addresses.map((d) => [d.address.toLowerCase(), d]));
      const transfers = await chain.transfers(
        addresses.map((d) => d.address),
        cursor + 1n,
        confirmed,
      );
      for (const transfer of transfers) {
        const incoming = byAddress.get(transfer.to.toLowerCase());
        const outgoing = byAddress.get(transfer.from.toLowerCase());
        if (outgoing) dirty.add(outgoing.wallet);
        if (!incoming || transfer.value <= 0n) continue;
        dirty.add(incoming.wallet);
        const reference = `${transfer.transactionHash}:${transfer.logIndex}`;
        const entry = await ledger.withWallet(incoming.wallet, (trx) =>
          ledger.append(trx, {
            wallet: incoming.wallet,
            kind: 'deposit',
            amount: transfer.value,
            idempotencyKey: `deposit:${reference}`,
            reference,
          }),
        );
        if (entry) recorded += 1;
      }
    }
    const full = options.fullRefresh || !this.everyAddressRead || cursor === undefined;
    const wallets = full ? addresses.map((d) => d.wallet) : [...dirty];
    const byWallet = new Map(addresses.map((d) => [d.wallet, d]));
    for (const wallet of wallets) {
      const deposit = byWallet.get(wallet);
      if (!deposit) continue;
      const balance = await chain.balanceOf(deposit.address, confirmed);
      await ledger.recordOnChainBalance(wallet, balance, confirmed);
    }
    if (full) this.everyAddressRead = true;
    if (cursor === undefined || confirmed > cursor) await this.writeCursor(confirmed, cursor);
    if (recorded > 0)
      logger.info({ deposits: recorded, block: confirmed.toString() }, 'ledger: deposits confirmed');
    return { confirmedBlock: confirmed, refreshed: wallets.length, deposits: recorded };
  }

  private now(): number {
    return this.deps.clock.now().getTime();
  }

  private async readCursor(): Promise<bigint | undefined> {
    const row = (await this.deps
      .db('ledger_chain_cursor')
      .where({ name: this.cursorName })
      .first(this.deps.db.raw('cast(block as text) as block'))) as { block: string } | undefined;
    return row ? BigInt(row.block) : undefined;
  }

  private async writeCursor(block: bigint, previous: bigint | undefined): Promise<void> {
    const { db } = this.deps;
    const now = this.now();
    if (previous === undefined) {
      await db('ledger_chain_cursor')
        .insert({ name: this.cursorName, block: block.toString(), updated_at: now })
        .onConflict('name')
        .ignore();
      return;
    }
    // Only forward: a slower replica never moves the cursor back.
    await db('ledger_chain_cursor')
      .where({ name: this.cursorName })
      .andWhere('block', '<', block.toString())
      .update({ block: block.toString(), updated_at: now });
  }
}
