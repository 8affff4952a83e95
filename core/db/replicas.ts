import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import type { Knex } from 'knex';
import type { Logger } from '../log.ts';
import { PeriodicPass } from '../periodic.ts';
import { databaseNowMs, type Database } from './database.ts';

export interface ReplicaSettings {
  /** How often this process writes its heartbeat. */
  heartbeatMs: number;
  /** A replica whose last heartbeat is older than this (by the database's clock) is dead. */
  deadAfterMs: number;
  /**
   * Whether several processes of one service share the database. When not (one machine), each
   * service has one process: another process's claim on its work was its predecessor's.
   */
  shared: boolean;
}

/**
 * This process as one of the replicas sharing the database: a row in `replicas` under an id drawn at
 * start-up, its heartbeat written every `heartbeatMs` by the database's clock, and deleted on a
 * graceful stop. What a replica claims (a retry queue's row) names its id, so another replica can tell
 * a live claim from one a dead process left: alive is a heartbeat younger than `deadAfterMs`.
 */
export class Replica {
  readonly id = randomUUID();
  private readonly heartbeat: PeriodicPass<void>;
  private services = '';

  private constructor(
    private readonly db: Database,
    private readonly logger: Logger,
    private readonly settings: ReplicaSettings,
  ) {
    this.heartbeat = new PeriodicPass({
      pass: () => this.beat(),
      intervalMs: settings.heartbeatMs,
      logger,
      failure: 'replica: the heartbeat could not be written',
    });
  }

  /** Registers this process and starts its heartbeat; the rows of replicas long dead are deleted. */
  static async register(db: Database, logger: Logger, settings: ReplicaSettings): Promise<Replica> {
    const replica = new Replica(db, logger, settings);
    await db('replicas').where('heartbeat_at', '<=', replica.deadSince()).delete();
    await replica.insert();
    replica.heartbeat.start();
    return replica;
  }

  /** Whether replicas share the database (`database.shared`): state kept per process is not shared. */
  get shared(): boolean {
    return this.settings.shared;
  }

  /** Records which services this process serves (for people reading `replicas`). */
  async serving(services: readonly string[]): Promise<void> {
    this.services = services.join(',');
    await this.db('replicas').where({ id: this.id }).update({ services: this.services });
  }

  /** Whether the replica `id` is alive: registered, with a heartbeat younger than `deadAfterMs`. */
  async alive(id: string): Promise<boolean> {
    return (await this.live().where({ id }).first()) !== undefined;
  }

  /** The ids of the live replicas, this one included: a subquery for `whereIn`/`whereNotIn`. */
  live(): Knex.QueryBuilder {
    return this.db('replicas').select('id').where('heartbeat_at', '>', this.deadSince());
  }

  /**
   * The replicas whose claims on a service's work (a retry queue's rows, which only that service's
   * processes claim) are still theirs: the live ones when replicas share the database; this process
   * alone when not, since a predecessor killed a moment ago still looks alive for `deadAfterMs`.
   */
  claimersAlive(): Knex.QueryBuilder {
    return this.settings.shared ? this.live() : this.db('replicas').select('id').where({ id: this.id });
  }

  /** Graceful stop: the heartbeat ends, and the row goes (what this process claimed is an orphan now). */
  async close(): Promise<void> {
    await this.heartbeat.stop();
    await this.db('replicas').where({ id: this.id }).delete();
  }

  private async beat(): Promise<void> {
    const beaten = await this.db('replicas')
      .where({ id: this.id })
      .update({ heartbeat_at: databaseNowMs(this.db) });
    if (beaten === 1) return;
    // Deleted as dead while this process did not run (paused, or cut off from the database): it is
    // alive again, but what it had claimed may have been taken over meanwhile.
    this.logger.warn(
      { replica: this.id },
      'replica: registered again after being taken for dead (no heartbeat for too long)',
    );
    await this.insert();
  }

  private insert(): Promise<unknown> {
    const now = databaseNowMs(this.db);
    return this.db('replicas').insert({
      id: this.id,
      services: this.services,
      host: hostname().slice(0, 255),
      pid: process.pid,
      started_at: now,
      heartbeat_at: now,
    });
  }

  /** The heartbeat time at and before which a replica is dead. */
  private deadSince(): Knex.Raw {
    return this.db.raw('? - ?', [databaseNowMs(this.db), this.settings.deadAfterMs]);
  }
}
