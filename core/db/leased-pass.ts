import type { Knex } from 'knex';
import { isLeaseLost, leaseLost } from '@sigil/plugin-api';
import type { Clock } from '../clock.ts';
import type { Logger } from '../log.ts';
import { PeriodicPass } from '../periodic.ts';
import type { DatabaseLeases, Lease } from './leases.ts';
import { Renewal } from './renewal.ts';

/** The leases a replica's jobs take: the database's, as `holder` (this replica's id), each `leaseMs` unrenewed. */
export interface JobLeases {
  leases: DatabaseLeases;
  holder: string;
  leaseMs: number;
}

/** What a leased pass runs with: its lease, a signal aborted once the lease is lost, and fenced writes. */
export interface HeldLease {
  readonly lease: Lease;
  /** Aborted, with the plugin API's `leaseLost` error, when a renewal finds the lease lost. */
  readonly signal: AbortSignal;
  /** A transaction whose writes happen under the lease or not at all (see `Leases.fenced`). */
  fenced<T>(work: (trx: Knex.Transaction) => Promise<T>): Promise<T>;
}

/**
 * A job run once per interval across every replica of a service: each interval of the injected clock
 * (slot `floor((now - phaseMs) / intervalMs)`) is an occurrence with a lease of its own,
 * `<name>:<slot>`, and only the replica that takes it runs the job for that slot, however the
 * replicas' timers fall.
 *
 * Every replica looks every `min(intervalMs, leaseMs, lookEveryMs)`, from the first slot that begins
 * an interval or more after it was made: as with a timer, a replica's first run is an interval after
 * its start, so replicas restarting do not each run the job at once. A job due at a time of day
 * (`first: 'next'`) runs from the next slot instead, as a daily refresh at 03:00 made at 02:59 runs at
 * 03:00. The holder renews the lease every third of `leaseMs` while the job runs, and aborts the job's
 * signal should it lose it. Once the job ends (failed too: the next slot tries again), the lease is
 * kept to the slot's end and an interval beyond, so no replica runs the slot again, even one whose
 * clock lags by less than an interval. A holder that dies mid-job stops renewing: its lease expires
 * within `leaseMs`, and the next replica to look takes the slot over and runs it.
 */
export class LeasedPass {
  private readonly periodic: PeriodicPass<boolean>;
  private readonly firstSlot: number;
  private readonly phaseMs: number;

  constructor(
    private readonly options: {
      leases: DatabaseLeases;
      /** Who takes the leases: this replica's id. */
      holder: string;
      name: string;
      job: (held: HeldLease) => Promise<unknown>;
      intervalMs: number;
      leaseMs: number;
      /** Where the slots begin within an interval (a daily job at 03:00 UTC: 3 h); 0 by default. */
      phaseMs?: number;
      /** `next`: the first slot run is the next to begin, not the first an interval or more away. */
      first?: 'an interval on' | 'next';
      /** Looks for a due slot at most this long apart (less than `leaseMs`). */
      lookEveryMs?: number;
      clock: Clock;
      logger: Logger;
      /** The warning a failed job logs (with the error's message). */
      failure: string;
    },
  ) {
    this.phaseMs = options.phaseMs ?? 0;
    this.firstSlot =
      options.first === 'next'
        ? this.slotNow() + 1
        : Math.ceil((options.clock.now().getTime() - this.phaseMs + options.intervalMs) / options.intervalMs);
    this.periodic = new PeriodicPass({
      pass: () => this.runSlot(),
      intervalMs: Math.min(options.intervalMs, options.leaseMs, options.lookEveryMs ?? Infinity),
      logger: options.logger,
      failure: options.failure,
    });
  }

  /** When the next slot this replica may run begins (another replica may run it). */
  get nextRun(): Date {
    return new Date(this.slotStart(Math.max(this.slotNow() + 1, this.firstSlot)));
  }

  /** Runs the job for the current slot if no replica has taken it: true when it ran here. */
  runDue(): Promise<boolean> {
    return this.periodic.run();
  }

  start(): void {
    this.periodic.start();
  }

  /** Stops looking, and waits for a job under way. */
  stop(): Promise<void> {
    return this.periodic.stop();
  }

  private async runSlot(): Promise<boolean> {
    const { leases, holder, name, leaseMs, logger } = this.options;
    const slot = this.slotNow();
    if (slot < this.firstSlot) return false;
    const lease = await leases.acquire(`${name}:${slot}`, holder, leaseMs);
    if (lease === undefined) return false;
    const renewal = new Renewal(leaseMs, () => leases.renew(lease), {
      lost: () => leaseLost(lease.name),
      failed: (err) => logger.warn({ err: (err as Error).message, lease: lease.name }, 'lease not renewed'),
    });
    try {
      await this.options.job({
        lease,
        signal: renewal.signal,
        fenced: (work) => leases.fenced(lease, work),
      });
    } catch (err) {
      if (!renewal.signal.aborted && !isLeaseLost(err)) throw err;
      logger.info({ lease: lease.name }, 'lease lost mid-job: another replica takes the slot over');
    } finally {
      renewal.stop();
      await this.closeSlot(lease, slot);
    }
    return true;
  }

  /**
   * The slot's job ended: its lease is kept to the slot's end and an interval beyond, and the leases
   * of slots past that are deleted. Should that fail, the lease expires unrenewed and another
   * replica may run the slot again: a duplicate, never a gap.
   */
  private async closeSlot(lease: Lease, slot: number): Promise<void> {
    const { leases, name, clock, logger } = this.options;
    try {
      await leases.renew(lease, this.slotStart(slot + 2) - clock.now().getTime());
      await leases.forgetExpired(`${name}:`);
    } catch (err) {
      logger.warn(
        { err: (err as Error).message, lease: lease.name },
        'the lease of a slot done was not kept',
      );
    }
  }

  private slotNow(): number {
    return Math.floor((this.options.clock.now().getTime() - this.phaseMs) / this.options.intervalMs);
  }

  private slotStart(slot: number): number {
    return slot * this.options.intervalMs + this.phaseMs;
  }
}
