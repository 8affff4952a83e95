import { readFile } from 'node:fs/promises';
import { resolve as resolvePath } from 'node:path';
import { z } from 'zod';
import {
  type CacheStatus,
  type Clock,
  coreServices,
  definePlugin,
  extensionPoints,
  type InstalledPackage,
  type PackageRegistryV1,
  type PackageSpec,
  type PluginLifecycle,
  type PluginLogger,
  provide,
  type RefreshReport,
  type RefreshResult,
  type ResolvedPackage,
} from '@sigil/plugin-api';
import { CacheLayout, directorySize, type EntryRecord } from './cache.ts';
import { checkResolved, checkSpec, NpmClient, PackageRegistryError } from './npm.ts';
import { DailySchedule, UTC_TIME_OF_DAY } from '@sigil/plugin-api/schedule';

export { PackageIntegrityError, PackageRegistryError } from './npm.ts';

export const npmRegistryConfig = z
  .object({
    /** Registry URL, for scoped and unscoped packages alike. */
    registry: z.url().default('https://registry.npmjs.org/'),
    /** Cache directory; relative paths resolve from the working directory. */
    cacheDir: z.string().min(1).default('data/packages'),
    /** Packages `refresh` keeps installed, besides those added with `keepWarm`. */
    warm: z.array(z.object({ name: z.string(), range: z.string().default('latest') }).strict()).default([]),
    refresh: z
      .object({
        /** Run the daily refresh at all. */
        enabled: z.boolean().default(true),
        /** UTC time of day of the daily refresh, `HH:MM`. */
        at: z.string().regex(UTC_TIME_OF_DAY, 'a UTC time of day, HH:MM').default('03:00'),
        /** How often the clock is checked against the next run. */
        pollSeconds: z.number().int().positive().default(60),
      })
      .strict()
      .default({ enabled: true, at: '03:00', pollSeconds: 60 }),
  })
  .strict();

export type NpmRegistryConfig = z.infer<typeof npmRegistryConfig>;

interface Progress {
  done: number;
  total: number;
}

/**
 * The npm registry plugin. Besides the contract it has `schedule.runDue()` for whoever drives time
 * (tests with a ManualClock; in production `start()` polls it).
 */
export class NpmRegistry implements PackageRegistryV1, PluginLifecycle {
  readonly specVersion = 'v1' as const;
  readonly registryKind = 'npm' as const;
  readonly cache: CacheLayout;
  /** The daily refresh; `undefined` when `refresh.enabled` is false. */
  readonly schedule: DailySchedule | undefined;
  private readonly npm: NpmClient;
  private readonly warm = new Map<string, PackageSpec>();
  private readonly installing = new Map<string, Promise<InstalledPackage>>();
  private refreshing: { progress: Progress; report: Promise<RefreshReport> } | undefined;
  private lastReport: RefreshReport | undefined;
  private prepared: Promise<void> | undefined;

  constructor(
    private readonly config: NpmRegistryConfig,
    private readonly clock: Clock,
    private readonly logger: PluginLogger,
  ) {
    this.cache = new CacheLayout(resolvePath(config.cacheDir), clock);
    this.npm = new NpmClient({ registry: config.registry, cache: this.cache.npm, logger });
    this.keepWarm(config.warm);
    this.schedule = config.refresh.enabled
      ? new DailySchedule(clock, config.refresh.at, () => this.runRefresh('schedule'))
      : undefined;
  }

  async start(): Promise<void> {
    await this.ready();
    this.schedule?.startPolling(this.config.refresh.pollSeconds * 1000, (err) =>
      this.logger.error({ err }, 'scheduled package cache refresh failed'),
    );
    this.logger.info(
      { cacheDir: this.cache.root, registry: this.config.registry, nextRefresh: this.schedule?.nextRun },
      'npm package cache ready',
    );
  }

  async stop(): Promise<void> {
    await this.schedule?.stopPolling();
    await this.refreshing?.report.catch(() => undefined);
  }

  resolve(packageName: string, versionRange: string): Promise<ResolvedPackage> {
    return this.npm.resolve(packageName, versionRange);
  }

  async install(resolved: ResolvedPackage): Promise<InstalledPackage> {
    checkResolved(resolved);
    await this.ready();
    // Cache first, before anything could touch the network: this is the offline guarantee.
    const cached = await this.cache.read(resolved);
    if (cached) return this.installedFrom(cached);
    const key = CacheLayout.key(resolved);
    let pending = this.installing.get(key);
    if (!pending) {
      pending = this.installFresh(resolved).finally(() => this.installing.delete(key));
      this.installing.set(key, pending);
    }
    return pending;
  }

  keepWarm(specs: readonly PackageSpec[]): void {
    for (const spec of specs) {
      checkSpec(spec.name, spec.range);
      this.warm.set(`${spec.name}@${spec.range}`, { name: spec.name, range: spec.range });
    }
  }

  refresh(): Promise<RefreshReport> {
    return this.runRefresh('demand');
  }

  async cacheStatus(): Promise<CacheStatus> {
    await this.ready();
    const records = await this.cache.list();
    const entries = records
      .map(({ name, version, digest, installedAt, sizeBytes, hasInstallScripts }) => ({
        name,
        version,
        digest,
        installedAt,
        sizeBytes,
        hasInstallScripts,
      }))
      .sort((a, b) => a.name.localeCompare(b.name) || a.installedAt.localeCompare(b.installedAt));
    const last = this.lastReport ?? (await this.cache.readRefreshReport());
    return {
      entries,
      summary: {
        packages: entries.length,
        bytes: entries.reduce((sum, entry) => sum + entry.sizeBytes, 0),
        lastRefresh: last?.finishedAt ?? null,
        nextRefresh: this.schedule?.nextRun.toISOString() ?? null,
        refreshing: this.refreshing ? { ...this.refreshing.progress } : null,
        failed: last?.results.filter((result) => result.status === 'failed').length ?? 0,
      },
    };
  }

  /** Creates the layout and clears a crashed install's leftovers, once, before the first use. */
  private ready(): Promise<void> {
    this.prepared ??= this.cache.prepare().then((leftovers) => {
      if (leftovers.length > 0) {
        this.logger.warn({ leftovers }, 'removed incomplete installs left by an earlier run');
      }
    });
    return this.prepared;
  }

  private async installFresh(resolved: ResolvedPackage): Promise<InstalledPackage> {
    // An install of the same package may have finished while `install` looked in the cache.
    const done = await this.cache.read(resolved);
    if (done) return this.installedFrom(done);
    const packageId = `${resolved.name}@${resolved.version}`;
    const started = performance.now();
    this.logger.info({ package: packageId, digest: resolved.digest }, 'installing package');
    const staged = await this.cache.stage(resolved);
    try {
      const tree = await this.npm.installTree(staged, resolved);
      const record: Omit<EntryRecord, 'layout'> = {
        name: resolved.name,
        version: resolved.version,
        digest: resolved.digest,
        installedAt: this.clock.now().toISOString(),
        sizeBytes: await directorySize(staged),
        hasInstallScripts: tree.installScripts.length > 0,
        installScripts: tree.installScripts,
        packages: tree.packages,
      };
      await this.cache.commit(staged, record);
      const entry = await this.cache.read(resolved);
      if (!entry) {
        throw new PackageRegistryError(
          'install_failed',
          `entry of ${packageId} vanished right after it was committed`,
          { package: packageId },
        );
      }
      this.logger.info(
        {
          package: packageId,
          packages: entry.packages,
          bytes: entry.sizeBytes,
          ms: Math.round(performance.now() - started),
          ...(entry.hasInstallScripts ? { installScriptsNotRun: entry.installScripts } : {}),
        },
        'installed package',
      );
      return this.installedFrom(entry);
    } catch (err) {
      await this.cache.discard(staged);
      this.logger.warn({ package: packageId, err }, 'install failed; nothing was kept');
      throw err;
    }
  }

  private async installedFrom(entry: EntryRecord): Promise<InstalledPackage> {
    const root = this.cache.entryDir(entry);
    const path = resolvePath(root, 'node_modules', entry.name);
    const { bin } = JSON.parse(await readFile(resolvePath(path, 'package.json'), 'utf8')) as {
      bin?: string | Record<string, string>;
    };
    return {
      name: entry.name,
      version: entry.version,
      digest: entry.digest,
      installedAt: entry.installedAt,
      sizeBytes: entry.sizeBytes,
      hasInstallScripts: entry.hasInstallScripts,
      path,
      root,
      bin: binPaths(entry.name, path, bin),
    };
  }

  private runRefresh(trigger: RefreshReport['trigger']): Promise<RefreshReport> {
    if (this.refreshing) return this.refreshing.report;
    const specs = [...this.warm.values()];
    const progress: Progress = { done: 0, total: specs.length };
    const report = this.refreshAll(specs, trigger, progress).finally(() => {
      this.refreshing = undefined;
    });
    this.refreshing = { progress, report };
    return report;
  }

  private async refreshAll(
    specs: readonly PackageSpec[],
    trigger: RefreshReport['trigger'],
    progress: Progress,
  ): Promise<RefreshReport> {
    const startedAt = this.clock.now().toISOString();
    this.logger.info({ packages: specs.length, trigger }, 'package cache refresh started');
    const results: RefreshResult[] = [];
    // One at a time: progress stays readable, and a refresh never competes with serving for the disk.
    for (const spec of specs) {
      const result = await this.refreshOne(spec);
      results.push(result);
      progress.done += 1;
      this.logger.info(
        { progress: `${progress.done}/${progress.total}`, ...result },
        `package cache refresh: ${spec.name}@${spec.range} ${result.status}`,
      );
    }
    const report: RefreshReport = { startedAt, finishedAt: this.clock.now().toISOString(), trigger, results };
    this.lastReport = report;
    await this.cache.writeRefreshReport(report);
    const failed = results.filter((result) => result.status === 'failed').length;
    this.logger[failed > 0 ? 'warn' : 'info'](
      { packages: results.length, failed, nextRefresh: this.schedule?.nextRun },
      'package cache refresh finished',
    );
    return report;
  }

  private async refreshOne(spec: PackageSpec): Promise<RefreshResult> {
    try {
      const resolved = await this.resolve(spec.name, spec.range);
      const known = await this.cache.read(resolved);
      await this.install(resolved);
      return {
        ...spec,
        status: known ? 'cached' : 'installed',
        version: resolved.version,
        digest: resolved.digest,
      };
    } catch (err) {
      return { ...spec, status: 'failed', error: err instanceof Error ? err.message : String(err) };
    }
  }
}

/** A package's `bin` field as absolute paths; a string `bin` is named after the unscoped package. */
function binPaths(
  name: string,
  path: string,
  bin: string | Record<string, string> | undefined,
): Record<string, string> {
  const entries: [string, string][] =
    typeof bin === 'string' ? [[name.split('/').pop() ?? name, bin]] : Object.entries(bin ?? {});
  return Object.fromEntries(entries.map(([command, file]) => [command, resolvePath(path, file)]));
}

export default definePlugin({
  kind: 'package-registry',
  name: 'registry-npm',
  specVersion: 'v1',
  description:
    'npm registry: sha512-verified installs with install scripts off, into an atomic content-addressed cache refreshed daily',
  config: npmRegistryConfig,
  dependencies: { clock: coreServices.clock },
  provides: [provide(extensionPoints.registryKinds, 'npm')],
  create: ({ config, deps, logger }) => new NpmRegistry(config, deps.clock, logger),
});
