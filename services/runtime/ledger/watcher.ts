import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';
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
 * reads balanceOf at that block for each address a transfer touched; every `refreshMs` it reads every
 * deposit address, which also catches anything the events missed. A balance read at an older block
 * never replaces a newer one, so replicas may watch at once.
 */
export class BalanceWatcher {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<WatchReport> | undefined;
  private lastFullRefresh = -Infinity;

  constructor(
    private readonly deps: {
      db: Database;
      ledger: Ledger;
      deposits: DepositAddresses;
      chain: LedgerChain;
      logger: Logger;
      /** What the full refresh every `refreshMs` and the cursor's `updated_at` are timed by. */
      clock: Clock;
      pollMs: number;
      refreshMs: number;
    },
  ) {}

  private get cursorName(): string {
    return `transfers:${this.deps.chain.options.chainId}:${this.deps.chain.token.toLowerCase()}`;
  }

  /** One pass (polls never overlap in a process: a second call waits for the running one). */
  poll(options: { fullRefresh?: boolean } = {}): Promise<WatchReport> {
    const pass = (this.running ?? Promise.resolve()).then(
      () => this.pass(options),
      () => this.pass(options),
    );
    this.running = pass;
    return pass;
  }

  /** Polls at once (a first start sets the cursor, so deposits from then on are in the history), then every pollMs. */
  start(): void {
    if (this.timer) return;
    const poll = () =>
      this.poll().catch((err: unknown) =>
        this.deps.logger.warn(
          { err: (err as Error).message },
          'ledger: balance watcher poll failed; retrying',
        ),
      );
    void poll();
    this.timer = setInterval(poll, this.deps.pollMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running?.catch(() => undefined);
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
    const full =
      options.fullRefresh || cursor === undefined || this.now() - this.lastFullRefresh >= this.deps.refreshMs;
    const wallets = full ? addresses.map((d) => d.wallet) : [...dirty];
    const byWallet = new Map(addresses.map((d) => [d.wallet, d]));
    for (const wallet of wallets) {
      const deposit = byWallet.get(wallet);
      if (!deposit) continue;
      const balance = await chain.balanceOf(deposit.address, confirmed);
      await ledger.recordOnChainBalance(wallet, balance, confirmed);
    }
    if (full) this.lastFullRefresh = this.now();
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
