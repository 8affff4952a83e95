import type { Clock } from '../../core/clock.ts';
import type { Logger } from '../../core/log.ts';
import type { CacheContents, PackageRegistryV2 } from '@sigil/plugin-api';
import { DailySchedule } from '@sigil/plugin-api/schedule';
import type { Catalog } from './catalog.ts';
import type { ServerDirectory } from './servers.ts';

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
 */
export class Warmup {
  private current: Promise<WarmupOutcome> | undefined;
  private progress: { done: number; total: number } | null = null;
  private lastRun: string | null = null;
  private stopped = false;
  /** The daily refresh; undefined when `gateway.refresh.enabled` is off. */
  readonly schedule: DailySchedule | undefined;

  constructor(
    private readonly deps: {
      catalog: Catalog;
      servers: ServerDirectory;
      /** The registry plugins by the registry kinds they provide (a plugin may provide several). */
      registries: () => ReadonlyMap<string, PackageRegistryV2>;
      clock: Clock;
      logger: Logger;
      refresh: { enabled: boolean; at: string; pollSeconds: number };
    },
  ) {
    this.schedule = deps.refresh.enabled
      ? new DailySchedule(deps.clock, deps.refresh.at, () => this.run('schedule'))
      : undefined;
  }

  /** Polls the daily refresh's time (a timer that does not keep the process alive). */
  startSchedule(): void {
    this.schedule?.startPolling(this.deps.refresh.pollSeconds * 1000, (err) =>
      this.deps.logger.error({ err }, 'the daily package refresh failed'),
    );
  }

  /** Starts a warmup, or joins the one running. */
  run(trigger: 'start-up' | 'demand' | 'schedule'): Promise<WarmupOutcome> {
    this.current ??= this.verifyAll(trigger).finally(() => {
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
    await this.schedule?.stopPolling();
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
        nextRefresh: this.schedule?.nextRun.toISOString() ?? null,
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

  private async verifyAll(trigger: string): Promise<WarmupOutcome> {
    const entries = this.deps.catalog.all();
    this.progress = { done: 0, total: entries.length };
    this.deps.logger.info(
      { trigger, servers: entries.length },
      'warmup: installing and verifying catalog servers',
    );
    let verified = 0;
    for (const [index, entry] of entries.entries()) {
      if (this.stopped) break;
      const details = await this.deps.servers.verify(entry.id);
      if (details.tier !== null) verified++;
      this.progress = { done: index + 1, total: entries.length };
      this.deps.logger.info(
        {
          server: entry.id,
          tier: details.tier,
          tools: details.tools.length,
          filter: details.filter.status,
          error: details.lastError ?? undefined,
        },
        `warmup ${index + 1}/${entries.length}: ${entry.id} ${details.tier ?? 'failed'}`,
      );
    }
    return { servers: entries.length, verified };
  }
}
