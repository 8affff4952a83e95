import { performance } from 'node:perf_hooks';
import { leaseLost } from './errors.ts';
import type { Knex } from 'knex';
import type { Lease, Leases } from './services.ts';

/**
 * One of several named leases (`names`: accounts, say) kept by this process for as long as it runs,
 * for something only one process at a time may do with the thing named (send from an account): taken
 * when one is free, renewed every third of `ttlMs`, and, once lost, taken again (any free one).
 *
 * `current()` answers the lease only while this process confirmed it (took or renewed it) less than
 * two thirds of `ttlMs` ago, by its own monotonic clock: a holder that paused, or lost the database,
 * stops acting under the lease before it can expire and pass to another holder. The measure is
 * elapsed time, not the injected clock: the lease expires by the database's clock, which moves in
 * real time. What must never be written under a lost lease is also written `fenced`.
 */
export class KeptLease {
  private held: { lease: Lease; confirmedAt: number } | undefined;
  private refreshing: Promise<Lease | undefined> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly leases: Leases,
    private readonly options: {
      /** The leases to choose from, tried in this order: the first free one is taken. */
      names: readonly string[];
      ttlMs: number;
      /** Told when the lease held changes: taken, lost or taken again (for the log). */
      changed?: (now: Lease | undefined, before: Lease | undefined) => void;
      /** Told when the database could not be reached to renew or take one (tried again at the next third). */
      failed?: (err: unknown) => void;
    },
  ) {}

  /** The lease held and confirmed recently enough to act under, or undefined. */
  current(): Lease | undefined {
    const held = this.held;
    if (!held || performance.now() - held.confirmedAt >= (this.options.ttlMs * 2) / 3) return undefined;
    return held.lease;
  }

  /** The lease to act under: the current one, else one renewed or taken now; undefined when none is free. */
  async ensure(): Promise<Lease | undefined> {
    return this.current() ?? (await this.refresh());
  }

  /** Runs `work` in a transaction fenced by the lease held now (rejected with `leaseLost` when none is). */
  fenced<T>(work: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
    const lease = this.current();
    if (!lease) return Promise.reject(leaseLost(this.options.names.join(', ')));
    return this.leases.fenced(lease, work);
  }

  /**
   * Takes a lease now if one is free (resolves once it was tried), and keeps one (renewed, or taken
   * again) every third of `ttlMs`.
   */
  async start(): Promise<void> {
    this.stopped = false;
    this.timer ??= setInterval(() => void this.refresh(), this.options.ttlMs / 3);
    this.timer.unref();
    await this.refresh();
  }

  /** Stops keeping the lease and gives it up, so another holder may take it at once. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    this.timer = undefined;
    await this.refreshing;
    const held = this.held;
    this.held = undefined;
    if (held) await this.leases.release(held.lease).catch((err: unknown) => this.options.failed?.(err));
  }

  /** Renews the lease held, or takes a free one; one refresh at a time. */
  private refresh(): Promise<Lease | undefined> {
    this.refreshing ??= this.renewOrTake()
      .catch((err: unknown) => {
        this.options.failed?.(err);
        return undefined;
      })
      .finally(() => (this.refreshing = undefined));
    return this.refreshing;
  }

  private async renewOrTake(): Promise<Lease | undefined> {
    if (this.stopped) return undefined;
    const before = this.held?.lease;
    const askedAt = performance.now();
    if (before && (await this.leases.renew(before))) {
      this.held = { lease: before, confirmedAt: askedAt };
      return before;
    }
    this.held = undefined;
    let taken: Lease | undefined;
    for (const name of this.options.names) {
      const takenAt = performance.now();
      taken = await this.leases.acquire(name, this.leases.holder, this.options.ttlMs);
      if (taken) {
        this.held = { lease: taken, confirmedAt: takenAt };
        break;
      }
    }
    if (taken !== before) this.options.changed?.(taken, before);
    return taken;
  }
}
