import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { leaseLost } from '../errors.ts';
import type { Database, Lease, Leases } from '../services.ts';

/**
 * Leases for a plugin under test, kept in this process by the system clock: a kit runs its plugin in
 * one process, so these keep the host's promises there (one holder at a time, a fence that grows
 * each time a lease is taken, a fenced transaction refused once the lease is lost) without a table.
 */
export class KitLeases implements Leases {
  /** The kit's one process: nothing outlives it, so no lease is ever freed by its holder's death. */
  readonly holder = randomUUID();
  private readonly leases = new Map<string, { holder: string; fence: number; expiresAt: number }>();

  /** `database`: where fenced transactions run (the kit's database). */
  constructor(private readonly database: () => Promise<Database>) {}

  async acquire(name: string, holder: string, ttlMs: number): Promise<Lease | undefined> {
    const current = this.leases.get(name);
    if (current && current.expiresAt > Date.now()) return undefined;
    const fence = (current?.fence ?? 0) + 1;
    this.leases.set(name, { holder, fence, expiresAt: Date.now() + ttlMs });
    return { name, holder, fence, ttlMs };
  }

  async renew(lease: Lease, ttlMs = lease.ttlMs): Promise<boolean> {
    const held = this.held(lease);
    if (held) held.expiresAt = Date.now() + ttlMs;
    return held !== undefined;
  }

  async release(lease: Lease): Promise<void> {
    const held = this.held(lease);
    if (held) held.expiresAt = 0;
  }

  async fenced<T>(lease: Lease, work: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
    if (!this.held(lease)) throw leaseLost(lease.name);
    return (await this.database()).transaction(work);
  }

  private held(lease: Lease) {
    const current = this.leases.get(lease.name);
    const held =
      current?.holder === lease.holder && current.fence === lease.fence && current.expiresAt > Date.now();
    return held ? current : undefined;
  }
}
