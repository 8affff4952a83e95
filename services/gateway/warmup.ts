import type { Clock } from '../../core/clock.ts';
import { LeasedPass } from '../../core/db/leased-pass.ts';
import type { DatabaseLeases } from '../../core/db/leases.ts';
import type { Logger } from '../../core/log.ts';
import type { CacheContents, PackageRegistryV2 } from '@sigil/plugin-api';
import { nextDailyRun, UTC_TIME_OF_DAY } from '@sigil/plugin-api/schedule';
import type { Catalog } from './catalog.ts';
import type { ServerDetails, ServerDirectory } from './servers.ts';

const DAY_MS = 86_400_000;

export interface WarmupStatus {
  summary: {
    servers: number;
    verified: number;
    smokePassed: number;
    blocked: number;
    failed: number;
    running: { done: number; total: number } | null;
    lastRun: string | null;
    packages: number;
    bytes: number;
    nextRefresh: string | null;
  };
  servers: {
    id: string;
    version: string | null;
    tier: string | null;
    filter: string;
    lastError: string | null;
  }[];
  caches: (CacheContents & { registry: string })[];
}

/** What started a warmup: a replica's start, an operator's `POST /api/warmup/refresh`, the daily refresh. */
export type WarmupTrigger = 'start-up' | 'demand' | 'schedule';

/** How a warmup ended: of the catalog's servers, how many are installed and verified. */
export interface WarmupOutcome {
  servers: number;
  verified: number;
}

/**
 * Installs and verifies every catalog server so a new user can list and call tools at once, and again
 * every day (`gateway.refresh`) for every registry kind: each server is resolved anew, so a new version
 * is installed and its tools checked against their pins, and a pinned version that changed is refused.
 * Progress goes to the log.
 *
 * Across replicas: a verification (resolve, install, probe, verdict, pins) is shared, recorded once
 * in the database. The daily refresh runs on one replica per day (a LeasedPass, `gateway:refresh`);
 * each server is verified by one replica at a time (ServerDirectory), the others taking its verdict.
 * A replica starting takes the verdict another recorded since the last refresh for the same catalog
 * entry rather than verify again; what it does itself is install the verified pins into its package
 * cache (a cache shared by the replicas has them already). Warm processes are each replica's own:
 * started on a call, never by the warmup.
 */
export class Warmup {
  private current: Promise<WarmupOutcome> | undefined;
  private progress: { done: number; total: number } | null = null;
  private lastRun: string | null = null;
  private stopped = false;
  /** The daily refresh, run by one replica per day; undefined when `gateway.refresh.enabled` is off. */
  private readonly refresh: LeasedPass | undefined;

  constructor(
    private readonly deps: {
      catalog: Catalog;
      servers: ServerDirectory;
      /** The registry plugins by the registry kinds they provide (a plugin may provide several). */
      registries: () => ReadonlyMap<string, PackageRegistryV2>;
      clock: Clock;
      logger: Logger;
      refresh: { enabled: boolean; at: string; pollSeconds: number };
      /** The daily refresh's leases, taken as `holder` (this replica's id) for `leaseMs` unrenewed. */
      leases: DatabaseLeases;
      holder: string;
      leaseMs: number;
    },
  ) {
    this.refresh = deps.refresh.enabled
      ? new LeasedPass({
          leases: deps.leases,
          holder: deps.holder,
          name: 'gateway:refresh',
          job: (held) => this.run('schedule', held.signal),
          intervalMs: DAY_MS,
          leaseMs: deps.leaseMs,
          phaseMs: timeOfDayMs(deps.refresh.at),
          first: 'next',
          lookEveryMs: deps.refresh.pollSeconds * 1000,
          clock: deps.clock,
          logger: deps.logger,
          failure: 'the daily package refresh failed',
        })
      : undefined;
  }

  /** When the daily refresh runs next (on one of the replicas); undefined when it is off. */
  get nextRefresh(): Date | undefined {
    return this.refresh?.nextRun;
  }

  /** Looks for the daily refresh's time (a timer that does not keep the process alive). */
  startSchedule(): void {
    this.refresh?.start();
  }

  /** Runs the daily refresh if it is due and no replica has run it today: true when it ran here. */
  refreshDue(): Promise<boolean> {
    return this.refresh?.runDue() ?? Promise.resolve(false);
  }

  /**
   * Starts a warmup, or joins the one running. `signal` aborted (the refresh's lease lost to another
   * replica, which runs it again) skips the servers left.
   */
  run(trigger: WarmupTrigger, signal?: AbortSignal): Promise<WarmupOutcome> {
    this.current ??= this.verifyAll(trigger, signal).finally(() => {
      this.current = undefined;
      this.progress = null;
      this.lastRun = this.deps.clock.now().toISOString();
    });
    return this.current;
  }

  /**
   * Lets a running warmup finish the server it is on and skips the rest: a shutdown waits for this
   * before the database closes under it.
   */
  async stop(): Promise<void> {
    this.stopped = true;
    await this.refresh?.stop();
    await this.current?.catch(() => undefined);
  }

  async status(): Promise<WarmupStatus> {
    const details = await this.deps.servers.list();
    const kindsOf = new Map<PackageRegistryV2, string[]>();
    for (const [kind, registry] of this.deps.registries())
      kindsOf.set(registry, [...(kindsOf.get(registry) ?? []), kind]);
    const caches = await Promise.all(
      [...kindsOf].map(async ([registry, kinds]) => ({
        registry: kinds.join(', '),
        ...(await registry.cacheStatus()),
      })),
    );
    return {
      summary: {
        servers: details.length,
        verified: details.filter((d) => d.tier !== null).length,
        smokePassed: details.filter((d) => d.tier === 'tool_smoke_passed').length,
        blocked: details.filter((d) => d.filter.status === 'blocked').length,
        failed: details.filter((d) => d.tier === null && d.lastError !== null).length,
        running: this.progress,
        lastRun: this.lastRun,
        packages: caches.reduce((sum, c) => sum + c.entries.length, 0),
        bytes: caches.reduce((sum, c) => sum + c.bytes, 0),
        nextRefresh: this.nextRefresh?.toISOString() ?? null,
      },
      servers: details.map((d) => ({
        id: d.id,
        version: d.version,
        tier: d.tier,
        filter: d.filter.status,
        lastError: d.lastError,
      })),
      caches,
    };
  }

  private async verifyAll(trigger: WarmupTrigger, signal: AbortSignal | undefined): Promise<WarmupOutcome> {
    const entries = this.deps.catalog.all();
    this.progress = { done: 0, total: entries.length };
    this.deps.logger.info(
      { trigger, servers: entries.length },
      'warmup: installing and verifying catalog servers',
    );
    let verified = 0;
    for (const [index, entry] of entries.entries()) {
      if (this.stopped || signal?.aborted) break;
      const details = await this.warm(entry.id, trigger).catch((err: unknown) => {
        this.deps.logger.warn({ err, serverId: entry.id }, 'warmup: the server was not warmed up');
        return undefined;
      });
      if (details && details.tier !== null) verified++;
      this.progress = { done: index + 1, total: entries.length };
      this.deps.logger.info(
        {
          server: entry.id,
          tier: details?.tier,
          tools: details?.tools.length,
          filter: details?.filter.status,
          error: details?.lastError ?? undefined,
        },
        `warmup ${index + 1}/${entries.length}: ${entry.id} ${details?.tier ?? 'failed'}`,
      );
    }
    return { servers: entries.length, verified };
  }

  /**
   * A server verified anew (a refresh), or, at this replica's start, unless a verdict of its entry
   * was recorded since the last daily refresh (any recorded one when the refresh is off), and then
   * its pin installed here. Throws when another replica's verification of it took too long.
   */
  private async warm(id: string, trigger: WarmupTrigger): Promise<ServerDetails> {
    const { servers, clock, refresh } = this.deps;
    if (trigger !== 'start-up') return servers.verify(id);
    const since = refresh.enabled ? nextDailyRun(clock.now(), refresh.at).getTime() - DAY_MS : 0;
    const details = await servers.verifyUnlessRecent(id, since);
    await servers.prepare(id).catch((err: unknown) => {
      this.deps.logger.warn(
        { err, serverId: id },
        'warmup: the pin is not installed here yet (a call installs it)',
      );
    });
    return details;
  }
}

/** `HH:MM` (UTC) as milliseconds into the day. */
function timeOfDayMs(at: string): number {
  const [, hours, minutes] = UTC_TIME_OF_DAY.exec(at) ?? [];
  return (Number(hours) * 60 + Number(minutes)) * 60_000;
}
