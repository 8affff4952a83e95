import type { Knex } from 'knex';
import { leaseLost, type Lease, type Leases } from '@sigil/plugin-api';
import { databaseNowMs, type Database } from './database.ts';

export type { Lease, Leases };

/**
 * Leases in the `leases` table (see the plugin API's `Leases`). Each operation is one compare-and-set
 * statement against the database's clock: of replicas racing for a lease, exactly one takes it.
 */
export class DatabaseLeases implements Leases {
  constructor(private readonly db: Database) {}

  async acquire(name: string, holder: string, ttlMs: number): Promise<Lease | undefined> {
    const now = databaseNowMs(this.db);
    // Inserted with fence 1, or taken over from an expired holder with the next fence; a live
    // holder's row fails the update's condition, and nothing is returned.
    const [taken] = (await this.db('leases')
      .insert({ name, holder, fence: 1, expires_at: this.db.raw('? + ?', [now, ttlMs]) })
      .onConflict('name')
      .merge({
        holder,
        fence: this.db.raw('leases.fence + 1'),
        expires_at: this.db.raw('? + ?', [now, ttlMs]),
      })
      .where('leases.expires_at', '<=', now)
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
