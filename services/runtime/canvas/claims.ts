import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { isSigilError, SigilError } from '@sigil/plugin-api';
import { type Database, databaseNowMs } from '../../../core/db/database.ts';
import type { Replica } from '../../../core/db/replicas.ts';

/** A run's claim was taken over (its replica stalled past it) or the run was released: it stops here. */
export const runClaimLost = (runId: string): SigilError =>
  new SigilError('unavailable', `Run ${runId} is executed by another replica now`, {
    details: { reason: 'run_claim_lost', runId },
  });

/** Runs at most one fence statement covers: 2 bound variables each, under SQLite's oldest limit of 999. */
const RUNS_PER_FENCE = 400;

/**
 * Which replica executes each unfinished canvas run: a claim in the run's row (`owner_replica`,
 * `owner_claim`, `owner_until`, database time), taken compare-and-set so that of replicas racing for a
 * run exactly one executes it, renewed while it runs, and the fence of every write of the run (see
 * `held`). A run is free once its replica is dead (`Replica.claimersAlive`), its claim ran out, or it
 * was released; a live replica's run is never taken.
 */
export class RunClaims {
  constructor(
    private readonly db: Database,
    private readonly replica: Replica,
    /** How long a claim lasts unrenewed (database.leaseSeconds). */
    readonly lifetimeMs: number,
  ) {}

  /** A new claim, and the columns that make a new run this replica's under it (merged into its insert). */
  forNewRun(): { claim: string; columns: Record<string, unknown> } {
    const claim = randomUUID();
    return { claim, columns: this.claimColumns(claim) };
  }

  /** The unfinished runs free to take over, oldest first, but those of `executing` (this process's). */
  async free(executing: ReadonlySet<string>): Promise<string[]> {
    const rows = (await this.freeRuns(this.db('canvas_runs')).orderBy('created_at').select('id')) as {
      id: string;
    }[];
    return rows.map((row) => row.id).filter((id) => !executing.has(id));
  }

  /** Takes the run if it is still free: the new claim, or undefined when another replica holds it. */
  async take(runId: string): Promise<string | undefined> {
    const claim = randomUUID();
    const taken = await this.freeRuns(this.db('canvas_runs').where({ id: runId })).update(
      this.claimColumns(claim),
    );
    return taken === 1 ? claim : undefined;
  }

  /** Extends the claim to its lifetime from now; false when it is no longer held (ran out, or taken). */
  async renew(runId: string, claim: string): Promise<boolean> {
    const now = databaseNowMs(this.db);
    const renewed = await this.db('canvas_runs')
      .where({ id: runId, owner_claim: claim })
      .andWhere('owner_until', '>', now)
      .update({ owner_until: this.db.raw('? + ?', [now, this.lifetimeMs]) });
    return renewed === 1;
  }

  /**
   * Of `claims` (run id → claim), the runs whose claim this transaction still holds. A write, not a
   * read: it locks the rows (PostgreSQL) or takes SQLite's write lock, so no run changes hands before
   * the transaction ends, and one taken over meanwhile is not among them.
   */
  async held(trx: Knex.Transaction, claims: ReadonlyMap<string, string>): Promise<Set<string>> {
    const held = new Set<string>();
    const pairs = [...claims];
    for (let i = 0; i < pairs.length; i += RUNS_PER_FENCE) {
      const chunk = pairs.slice(i, i + RUNS_PER_FENCE);
      const rows = (await trx('canvas_runs')
        .where((fenced) => {
          for (const [id, claim] of chunk) fenced.orWhere({ id, owner_claim: claim });
        })
        .update({ owner_claim: trx.ref('owner_claim') }, ['id'])) as { id: string }[];
      for (const row of rows) held.add(row.id);
    }
    return held;
  }

  /** Lets go of the runs this replica holds under `claims` (graceful stop): free to take at once. */
  async release(claims: ReadonlyMap<string, string>): Promise<void> {
    for (const [id, claim] of claims)
      await this.db('canvas_runs')
        .where({ id, owner_claim: claim })
        .update({ owner_replica: null, owner_claim: null, owner_until: null });
  }

  private claimColumns(claim: string): Record<string, unknown> {
    return {
      owner_replica: this.replica.id,
      owner_claim: claim,
      owner_until: this.db.raw('? + ?', [databaseNowMs(this.db), this.lifetimeMs]),
    };
  }

  /** The runs of `query` not ended and free: unclaimed, their replica dead, or their claim run out. */
  private freeRuns(query: Knex.QueryBuilder): Knex.QueryBuilder {
    return query
      .whereNull('ended_at')
      .andWhere((free) =>
        free
          .whereNull('owner_replica')
          .orWhereNotIn('owner_replica', this.replica.claimersAlive())
          .orWhere('owner_until', '<=', databaseNowMs(this.db)),
      );
  }
}

/** Whether `err` is `runClaimLost`'s. */
export const isRunClaimLost = (err: unknown): boolean =>
  isSigilError(err) && err.details?.reason === 'run_claim_lost';
