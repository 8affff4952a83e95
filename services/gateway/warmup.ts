import type { Clock } from '../../core/clock.ts';
import type { Logger } from '../../core/log.ts';
import type { CacheStatus, PackageRegistryV1 } from '@sigil/plugin-api';
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
  caches: (CacheStatus & { registry: string })[];
}

/** How a warmup ended: of the catalog's servers, how many are installed and verified. */
export interface WarmupOutcome {
  servers: number;
  verified: number;
}

/**
 * Installs and verifies every catalog server so a new user can list and call tools at once; the
 * registries keep the packages fresh on their own daily schedule. Progress goes to the log.
 */
export class Warmup {
  private current: Promise<WarmupOutcome> | undefined;
  private progress: { done: number; total: number } | null = null;
  private lastRun: string | null = null;
  private stopped = false;

  constructor(
    private readonly deps: {
      catalog: Catalog;
      servers: ServerDirectory;
      /** The registry plugins by the registry kinds they provide (a plugin may provide several). */
      registries: () => ReadonlyMap<string, PackageRegistryV1>;
      clock: Clock;
      logger: Logger;
    },
  ) {}

  /** Starts a warmup, or joins the one running. */
  run(trigger: 'start-up' | 'demand'): Promise<WarmupOutcome> {
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
    await this.current?.catch(() => undefined);
  }

  async status(): Promise<WarmupStatus> {
    const details = await this.deps.servers.list();
    const kindsOf = new Map<PackageRegistryV1, string[]>();
    for (const [kind, registry] of this.deps.registries())
      kindsOf.set(registry, [...(kindsOf.get(registry) ?? []), kind]);
    const caches = await Promise.all(
      [...kindsOf].map(async ([registry, kinds]) => ({
        registry: kinds.join(', '),
        ...(await registry.cacheStatus()),
      })),
    );
    const nextRefreshes = caches
      .map((c) => c.summary.nextRefresh)
      .filter((t): t is string => t !== null)
      .sort();
    return {
      summary: {
        servers: details.length,
        verified: details.filter((d) => d.tier !== null).length,
        smokePassed: details.filter((d) => d.tier === 'tool_smoke_passed').length,
        blocked: details.filter((d) => d.filter.status === 'blocked').length,
        failed: details.filter((d) => d.tier === null && d.lastError !== null).length,
        running: this.progress,
        lastRun: this.lastRun,
        packages: caches.reduce((sum, c) => sum + c.summary.packages, 0),
        bytes: caches.reduce((sum, c) => sum + c.summary.bytes, 0),
        nextRefresh: nextRefreshes[0] ?? null,
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
    for (const [kind, registry] of this.deps.registries()) {
      registry.keepWarm(
        entries.filter((e) => e.registry === kind).map((e) => ({ name: e.package, range: e.version })),
      );
    }
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
