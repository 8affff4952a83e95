import type { Clock } from '../clock.ts';
import type { Logger } from '../log.ts';
import { PeriodicPass } from '../periodic.ts';
import type { Database } from './database.ts';

/**
 * Where a table's rows say which work is still to be done and when to try it next (an outbox). The
 * table has `id`, `state`, `attempts` and `next_attempt_at` (ms since the epoch; 0: due now), indexed
 * on (state, next_attempt_at). A row in one of the open states is due once `next_attempt_at` has
 * passed.
 */
export interface RetryQueueOptions {
  table: string;
  /** The states of a row whose work is not finished. */
  openStates: readonly string[];
  /** How long a claim lasts: a row its worker did not finish by then (it died) is due again. */
  claimMs: number;
  /** The wait after a row's `attempts`-th failed attempt. */
  backoff: (attempts: number) => number;
  /** The column due rows are taken in the order of. */
  order: string;
  /** The most due rows one pass takes. */
  batch: number;
  /** The columns a claimed row is read with (its id is always among them). */
  columns: readonly string[];
}

/** Waits of `firstMs` after the first failure, doubling after each further one, up to `maxMs`. */
export const doublingBackoff =
  (firstMs: number, maxMs: number) =>
  (attempts: number): number =>
    Math.min(firstMs * 2 ** Math.max(0, attempts - 1), maxMs);

/**
 * The due rows of a retry table, claimed one by one. A claim moves `next_attempt_at` `claimMs` ahead,
 * compare-and-set on the value read, so of replicas racing for a row exactly one takes it, and the row
 * is due again when a claim runs out unfinished. Time is the injected clock's.
 */
export class RetryQueue<Row extends { id: string }> {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly options: RetryQueueOptions,
  ) {}

  /**
   * The rows due now, in `order`, at most `batch`: each is claimed just before it is handed out (so a
   * slow pass never holds rows it has not reached), and one another worker claimed first is skipped.
   */
  async *claimDue(): AsyncGenerator<Row> {
    const { table, openStates, order, batch, columns } = this.options;
    const due = (await this.db(table)
      .select(...columns, 'next_attempt_at')
      .whereIn('state', openStates)
      .andWhere('next_attempt_at', '<=', this.now())
      .orderBy(order)
      .limit(batch)) as (Row & { next_attempt_at: number | string })[];
    for (const row of due) {
      const claimed = await this.open(row.id)
        .andWhere('next_attempt_at', row.next_attempt_at)
        .update(this.claimColumns());
      if (claimed === 1) yield row;
    }
  }

  /** The columns that claim a row for `claimMs`, merged into the write that opens it (its worker is at it). */
  claimColumns(): { next_attempt_at: number } {
    return { next_attempt_at: this.now() + this.options.claimMs };
  }

  /** The columns of a failed attempt, the `attempts`-th: merged into the write that records why. */
  failureColumns(attempts: number): { attempts: number; next_attempt_at: number } {
    return { attempts, next_attempt_at: this.now() + this.options.backoff(attempts) };
  }

  /** Looks at an open row again in `ms` (not a failure: its work is waiting on something). */
  async later(id: string, ms: number): Promise<void> {
    await this.open(id).update({ next_attempt_at: this.now() + ms });
  }

  /** Makes every open row due now, whoever held it (start-up: what a dead process left is taken up). */
  makeAllDue(): Promise<number> {
    return this.db(this.options.table)
      .whereIn('state', this.options.openStates)
      .update({ next_attempt_at: 0 });
  }

  private open(id: string) {
    return this.db(this.options.table).where({ id }).whereIn('state', this.options.openStates);
  }

  private now(): number {
    return this.clock.now().getTime();
  }
}

/**
 * Works a retry queue: every `intervalMs` once started, and on demand, `beforePass` then each claimed
 * row in turn. Passes never overlap: one asked for (`pass`, `kick`) while one runs is run once more
 * after it, so a row made due meanwhile is not left for the next tick; a tick while one runs does not.
 */
export class RetryWorker<Row> {
  private readonly periodic: PeriodicPass<void>;
  private again = false;

  constructor(
    private readonly options: {
      queue: { claimDue(): AsyncIterable<Row> };
      handle: (row: Row) => Promise<void>;
      beforePass?: () => Promise<void>;
      intervalMs: number;
      logger: Logger;
      /** The warning a failed pass the worker ran by itself logs (with the error's message). */
      failure: string;
    },
  ) {
    this.periodic = new PeriodicPass({
      pass: () => this.passes(),
      intervalMs: options.intervalMs,
      logger: options.logger,
      failure: options.failure,
    });
  }

  /** A pass now, or once more after the one running; rejects when it fails. */
  pass(): Promise<void> {
    this.again = true;
    return this.periodic.run();
  }

  /** A pass now, for its side effects: a failure is logged, not thrown. */
  kick(): void {
    this.pass().catch((err: unknown) =>
      this.options.logger.warn({ err: (err as Error).message }, this.options.failure),
    );
  }

  start(): void {
    this.periodic.start();
  }

  /** Stops the timer and waits for the pass under way. */
  stop(): Promise<void> {
    return this.periodic.stop();
  }

  private async passes(): Promise<void> {
    do {
      this.again = false;
      await this.options.beforePass?.();
      for await (const row of this.options.queue.claimDue()) await this.options.handle(row);
    } while (this.again);
  }
}
