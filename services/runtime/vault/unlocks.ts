import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';
import type { Replica } from '../../../core/db/replicas.ts';
import type { Logger } from '../../../core/log.ts';
import { vaultStorage, type UnlockedOn } from './errors.ts';

/**
 * Which replica holds which session's vault unlocked, in `vault_unlocks` (session, replica, wallet
 * lookup, until the session ends): never a key, only what tells a replica that does not hold an unlock
 * where it is (for its refusal's hint), and what lets a lock through one replica end the session's
 * unlock on every other.
 */
export class VaultUnlocks {
  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    private readonly replica: Replica,
    private readonly logger: Logger,
  ) {}

  /** This replica holds the session's vault unlocked until `until` (unix ms); ended unlocks go. */
  record(session: string, lookup: string, until: number): Promise<void> {
    return this.storage(async () => {
      await this.db('vault_unlocks').where('until', '<=', this.clock.now().getTime()).delete();
      await this.db('vault_unlocks')
        .insert({ session_id: session, replica_id: this.replica.id, lookup, until })
        .onConflict(['session_id', 'replica_id'])
        .merge(['lookup', 'until']);
    });
  }

  /** Whether this replica's unlock of the session still stands (no lock through any replica ended it). */
  held(session: string): Promise<boolean> {
    return this.storage(
      async () =>
        (await this.db('vault_unlocks')
          .where({ session_id: session, replica_id: this.replica.id })
          .first('until')) !== undefined,
    );
  }

  /** Ends the session's unlock on every replica (each drops its keys at its next check). */
  end(session: string): Promise<void> {
    return this.storage(async () => {
      await this.db('vault_unlocks').where({ session_id: session }).delete();
    });
  }

  /**
   * Whether another live replica holds the vault unlocked: for `session` when given, else for any
   * session of the wallet. Unlocks of dead replicas (their memory is gone) and ended ones do not count.
   */
  elsewhere(lookup: string, session: string | undefined): Promise<UnlockedOn> {
    return this.storage(async () => {
      const found = await this.db('vault_unlocks')
        .where({ lookup, ...(session === undefined ? {} : { session_id: session }) })
        .andWhere('until', '>', this.clock.now().getTime())
        .whereNot({ replica_id: this.replica.id })
        .whereIn('replica_id', this.replica.live())
        .first('session_id');
      return found === undefined ? 'no_replica' : 'another_replica';
    });
  }

  /** A graceful stop: this replica's unlocks end with its memory. */
  async close(): Promise<void> {
    try {
      await this.db('vault_unlocks').where({ replica_id: this.replica.id }).delete();
    } catch (err) {
      // Left behind, they are ignored as this replica's row is gone (not live), and expire.
      this.logger.warn({ err }, 'provider vault: this replica’s unlocks could not be removed at stop');
    }
  }

  private storage<T>(work: () => Promise<T>): Promise<T> {
    return vaultStorage(this.logger, work);
  }
}
