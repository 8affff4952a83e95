import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { leaseLost, type Lease, type Leases } from '@sigil/plugin-api';
import { databaseNowMs, type Database } from './database.ts';
import type { Replica } from './replicas.ts';

export type { Lease, Leases };

/**
 * Leases in the `leases` table (see the plugin API's `Leases`). Each operation is one compare-and-set
 * statement against the database's clock: of replicas racing for a lease, exactly one takes it.
 */
export class DatabaseLeases implements Leases {
  readonly holder: string;

  /**
   * `replica`: this process, whose id is its `holder`. With it, a lease whose holder is a registered
   * replica no longer alive (`Replica.claimersAlive`) is free at once: a dead replica's lease is
   * taken over without waiting for it to expire, and on one machine (replicas not shared) a
   * predecessor's is free the moment its successor starts. Holders that are not replicas' ids (a
   * test's, a plugin's own) are judged by expiry alone.
   */
  constructor(
    private readonly db: Database,
    private readonly replica?: Replica,
  ) {
    this.holder = replica?.id ?? randomUUID();
  }

  async acquire(name: string, holder: string, ttlMs: number): Promise<Lease | undefined> {
    const now = databaseNowMs(this.db);
    // Inserted with fence 1, or taken over from an expired or dead holder with the next fence; a
    // live holder's row fails the update's condition, and nothing is returned.
    const [taken] = (await this.db('leases')
      .insert({ name, holder, fence: 1, expires_at: this.db.raw('? + ?', [now, ttlMs]) })
      .onConflict('name')
      .merge({
        holder,
        fence: this.db.raw('leases.fence + 1'),
        expires_at: this.db.raw('? + ?', [now, ttlMs]),
      })
      .where((free) => {
        free.where('leases.expires_at', '<=', now);
        if (this.replica)
          free.orWhereIn(
            'leases.holder',
            this.db('replicas').select('id').whereNotIn('id', this.replica.claimersAlive()),
          );
      })
      .returning('fence')) as { fence: number | string }[];
    return taken === undefined ? undefined : { name, holder, fence: Number(taken.fence), ttlMs };
  }

  async renew(lease: Lease, ttlMs = lease.ttlMs): Promise<boolean> {
    const now = databaseNowMs(this.db);
    const renewed = await this.held(this.db, lease).update({
      expires_at: this.db.raw('? + ?', [now, ttlMs]),
    });
    return renewed === 1;
  }

  async release(lease: Lease): Promise<void> {
    await this.held(this.db, lease).update({ expires_at: 0 });
  }

  fenced<T>(lease: Lease, work: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
    return this.db.transaction(async (trx) => {
      // A write, not a read: it locks the row (PostgreSQL) or takes SQLite's write lock, so the
      // lease cannot change hands before this transaction ends.
      const checked = await this.held(trx, lease).update({ holder: lease.holder });
      if (checked !== 1) throw leaseLost(lease.name);
      return work(trx);
    });
  }

  /**
   * Deletes the expired leases whose names begin with `prefix`: those of a job's past occurrences.
   * Their fences go with them, so only names never taken again may be forgotten (a past slot's).
   */
  async forgetExpired(prefix: string): Promise<number> {
    return this.db('leases')
      .whereRaw('substr(name, 1, ?) = ?', [prefix.length, prefix])
      .andWhere('expires_at', '<=', databaseNowMs(this.db))
      .delete();
  }

  /** The lease's row while `lease` holds it: same holder and fence, not expired. */
  private held(db: Knex, lease: Lease) {
    return db('leases')
      .where({ name: lease.name, holder: lease.holder, fence: lease.fence })
      .andWhere('expires_at', '>', databaseNowMs(db));
  }
}
