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

/** Another live replica serving a service this one serves, whose settings for it hash otherwise. */
export interface Disagreement {
  service: string;
  replica: string;
  host: string;
  pid: number;
  /** Its fingerprint of the service's settings. */
  fingerprint: string;
}

interface ReplicaRow {
  id: string;
  host: string;
  pid: number;
  config_fingerprints: string;
}

/**
 * This process as one of the replicas sharing the database: a row in `replicas` under an id drawn at
 * start-up, its heartbeat written every `heartbeatMs` by the database's clock, and deleted on a
 * graceful stop. What a replica claims (a retry queue's row) names its id, so another replica can tell
 * a live claim from one a dead process left: alive is a heartbeat younger than `deadAfterMs`.
 *
 * Replicas of a service must be configured alike; each records a fingerprint of its settings per
 * service it serves ({@link agreeOn}) and compares it with the live replicas' at every heartbeat.
 */
export class Replica {
  readonly id = randomUUID();
  private readonly heartbeat: PeriodicPass<void>;
  private services = '';
  private fingerprints: Readonly<Record<string, string>> | undefined;
  private disagreeing: readonly Disagreement[] = [];

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

  /**
   * Records what this replica's settings hash to, per service it serves (never a secret: see
   * services/shared-deployment.ts), and compares them with the live replicas' at once and at every
   * heartbeat from then on. A difference is logged as an error, not refused: during a rolling change
   * of the config, replicas with the old and the new settings run side by side.
   */
  async agreeOn(fingerprints: Readonly<Record<string, string>>): Promise<readonly Disagreement[]> {
    this.fingerprints = fingerprints;
    await this.db('replicas')
      .where({ id: this.id })
      .update({ config_fingerprints: JSON.stringify(fingerprints) });
    await this.compareSettings();
    return this.disagreeing;
  }

  /** This replica's fingerprint of `service`'s settings, and whether every live replica of it agrees. */
  settingsOf(service: string): { fingerprint: string; agreed: boolean } | undefined {
    const fingerprint = this.fingerprints?.[service];
    if (fingerprint === undefined) return undefined;
    return { fingerprint, agreed: !this.disagreeing.some((found) => found.service === service) };
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
    if (beaten !== 1) {
      // Deleted as dead while this process did not run (paused, or cut off from the database): it is
      // alive again, but what it had claimed may have been taken over meanwhile.
      this.logger.warn(
        { replica: this.id },
        'replica: registered again after being taken for dead (no heartbeat for too long)',
      );
      await this.insert();
    }
    await this.compareSettings();
  }

  /**
   * Compares this replica's fingerprints with those of the live replicas serving the same services; a
   * replica newly found to differ is logged as an error (once, not at every heartbeat), and so is the
   * end of every difference.
   */
  private async compareSettings(): Promise<void> {
    const mine = this.fingerprints;
    if (mine === undefined) return;
    const others: ReplicaRow[] = await this.db('replicas')
      .select('id', 'host', 'pid', 'config_fingerprints')
      .where('heartbeat_at', '>', this.deadSince())
      .whereNot({ id: this.id })
      .whereNotNull('config_fingerprints');
    const found: Disagreement[] = [];
    for (const other of others) {
      const theirs = JSON.parse(other.config_fingerprints) as Record<string, string>;
      for (const [service, fingerprint] of Object.entries(mine)) {
        const their = theirs[service];
        if (their !== undefined && their !== fingerprint)
          found.push({ service, replica: other.id, host: other.host, pid: other.pid, fingerprint: their });
      }
    }
    const key = (found: Disagreement) => `${found.service} ${found.replica} ${found.fingerprint}`;
    const known = new Set(this.disagreeing.map(key));
    const newly = found.filter((disagreement) => !known.has(key(disagreement)));
    const hadSome = this.disagreeing.length > 0;
    this.disagreeing = found;
    if (newly.length > 0)
      this.logger.error(
        { replica: this.id, fingerprints: mine, disagreeing: newly },
        'replica: live replicas of the same service run with other settings (their config fingerprint differs from this one): what a client sees depends on the replica it reaches; give every replica the same config',
      );
    else if (hadSome && found.length === 0)
      this.logger.info(
        { replica: this.id, fingerprints: mine },
        'replica: the live replicas agree on their settings again',
      );
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
      config_fingerprints: this.fingerprints === undefined ? null : JSON.stringify(this.fingerprints),
    });
  }

  /** The heartbeat time at and before which a replica is dead. */
  private deadSince(): Knex.Raw {
    return this.db.raw('? - ?', [databaseNowMs(this.db), this.settings.deadAfterMs]);
  }
}
