import type { Clock } from '../clock.ts';
import type { Logger } from '../log.ts';
import { PeriodicPass } from '../periodic.ts';
import type { Database } from './database.ts';
import type { Migration } from './migrations/index.ts';
import { Renewal } from './renewal.ts';
import type { Replica } from './replicas.ts';

/**
 * Where a table's rows say which work is still to be done and when to try it next (an outbox). The
 * table has `id`, `state`, `attempts`, `next_attempt_at` (ms since the epoch; 0: due now), indexed
 * on (state, next_attempt_at), and `claimed_by` (the replica at work on it, or null). A row in one of
 * the open states is due once `next_attempt_at` has passed, unless a live replica other than this one
 * claimed it; a dead replica's is due at once (see RetryQueue).
 */
export interface RetryQueueOptions {
  table: string;
  /** The states of a row whose work is not finished. */
  openStates: readonly string[];
  /**
   * How long a claim lasts unrenewed: a row its worker left unfinished without a word (the outcome's
   * write failed) is due again for its own replica then. A worker renews its claim while it works on
   * the row (`hold`), every third of it. Other replicas go by the claimer's liveness, not by this.
   */
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

/**
 * The migration that adds `claimed_by` to a retry table made before claims named their replica: the
 * replica whose worker claimed an open row, null when unclaimed (rows claimed before it are unclaimed:
 * due when their claim runs out).
 */
export const retryClaimerMigration = (name: string, table: string): Migration => ({
  name,
  async up(db) {
    await db.schema.alterTable(table, (t) => {
      t.string('claimed_by', 36).nullable();
    });
  },
  async down(db) {
    await db.schema.alterTable(table, (t) => {
      t.dropColumn('claimed_by');
    });
  },
});

/** Waits of `firstMs` after the first failure, doubling after each further one, up to `maxMs`. */
export const doublingBackoff =
  (firstMs: number, maxMs: number) =>
  (attempts: number): number =>
    Math.min(firstMs * 2 ** Math.max(0, attempts - 1), maxMs);

/**
 * The due rows of a retry table, claimed one by one by this replica. A claim moves `next_attempt_at`
 * `claimMs` ahead and names the replica, compare-and-set on the values read, so of replicas racing
 * for a row exactly one takes it.
 *
 * Who may take a claimed row depends on its claimer's liveness, never on the claim's age alone: a row
 * a live replica claimed stays its own however long its attempt takes (a slow RPC, a process paused
 * past its claim: another replica working it at the same time would send twice); a row whose claimer
 * is dead (`Replica.claimersAlive`) is taken at once, not when its claim runs out. The claim's time
 * only makes a row due again for its own claimer (an attempt whose outcome was never written). Claims'
 * times are the injected clock's; whether a claimer is alive is the replica registry's.
 */
export class RetryQueue<Row extends { id: string }> {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly replica: Replica,
    private readonly options: RetryQueueOptions,
  ) {}

  /**
   * The rows due now, in `order`, at most `batch`: each is claimed just before it is handed out (so a
   * slow pass never holds rows it has not reached), and one another worker claimed first is skipped.
   */
  async *claimDue(): AsyncGenerator<Row> {
    const { table, openStates, order, batch, columns } = this.options;
    const due = (await this.db(table)
      .select(...columns, 'next_attempt_at', 'claimed_by')
      .whereIn('state', openStates)
      .andWhere((free) =>
        free
          .where((waiting) =>
            waiting
              .where('next_attempt_at', '<=', this.now())
              .andWhere((mine) => mine.whereNull('claimed_by').orWhere('claimed_by', this.replica.id)),
          )
          .orWhere((orphaned) =>
            orphaned.whereNotNull('claimed_by').whereNotIn('claimed_by', this.replica.claimersAlive()),
          ),
      )
      .orderBy(order)
      .limit(batch)) as (Row & { next_attempt_at: number | string; claimed_by: string | null })[];
    for (const row of due) {
      const claimed = await this.open(row.id)
        .andWhere('next_attempt_at', row.next_attempt_at)
        .andWhere((same) =>
          row.claimed_by === null ? same.whereNull('claimed_by') : same.where({ claimed_by: row.claimed_by }),
        )
        .update(this.claimColumns());
      if (claimed === 1) yield row;
    }
  }

  /** The columns that claim a row for `claimMs`, merged into the write that opens it (its worker is at it). */
  claimColumns(): { next_attempt_at: number; claimed_by: string } {
    return { next_attempt_at: this.now() + this.options.claimMs, claimed_by: this.replica.id };
  }

  /**
   * Runs `work` on `row`, which this replica claimed, renewing the claim every third of `claimMs`
   * while it runs: an attempt longer than a claim (a slow RPC, a receipt awaited) keeps its row. A
   * renewal that fails (the database unreachable) is tried again at the next third.
   */
  async hold<T>(row: { id: string }, work: () => Promise<T>): Promise<T> {
    const renewal = new Renewal(
      this.options.claimMs,
      async () =>
        (await this.open(row.id)
          .where({ claimed_by: this.replica.id })
          .update({ next_attempt_at: this.now() + this.options.claimMs })) === 1,
    );
    try {
      return await work();
    } finally {
      renewal.stop();
    }
  }

  /** The columns of a failed attempt, the `attempts`-th: merged into the write that records why. */
  failureColumns(attempts: number): { attempts: number; next_attempt_at: number; claimed_by: null } {
    return { attempts, next_attempt_at: this.now() + this.options.backoff(attempts), claimed_by: null };
  }

  /** Looks at an open row again in `ms` (not a failure: its work is waiting on something). */
  async later(id: string, ms: number): Promise<void> {
    await this.open(id).update({ next_attempt_at: this.now() + ms, claimed_by: null });
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
      /** The rows due, each claimed, and the claim held while its row is handled. */
      queue: {
        claimDue(): AsyncIterable<Row>;
        hold<T>(row: NoInfer<Row>, work: () => Promise<T>): Promise<T>;
      };
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
      const { queue, handle } = this.options;
      for await (const row of queue.claimDue()) await queue.hold(row, () => handle(row));
    } while (this.again);
  }
}
