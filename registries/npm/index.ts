import { readFile } from 'node:fs/promises';
import { resolve as resolvePath } from 'node:path';
import { z } from 'zod';
import {
  type CacheContents,
  type Clock,
  coreServices,
  definePlugin,
  type EntryPoint,
  extensionPoints,
  type InstalledPackage,
  type InstalledServer,
  nodeLaunch,
  type PackageRegistryV2,
  type PackageSpec,
  type PluginLifecycle,
  type PluginLogger,
  provide,
  type ResolvedPackage,
} from '@sigil/plugin-api';
import { CacheLayout, directorySize, type EntryRecord } from './cache.ts';
import { checkResolved, NpmClient, PackageRegistryError } from './npm.ts';

export { PackageIntegrityError, PackageRegistryError } from './npm.ts';

export const npmRegistryConfig = z
  .object({
    /** Registry URL, for scoped and unscoped packages alike. */
    registry: z.url().default('https://registry.npmjs.org/'),
    /** Cache directory; relative paths resolve from the working directory. */
    cacheDir: z.string().min(1).default('data/packages'),
  })
  .strict();

export type NpmRegistryConfig = z.infer<typeof npmRegistryConfig>;

/** The npm registry plugin: what the gateway installs npm packages with (the gateway refreshes them daily). */
export class NpmRegistry implements PackageRegistryV2, PluginLifecycle {
  readonly specVersion = 'v2' as const;
  readonly registryKind = 'npm' as const;
  readonly cache: CacheLayout;
  private readonly npm: NpmClient;
  private readonly installing = new Map<string, Promise<InstalledPackage>>();
  private prepared: Promise<void> | undefined;

  constructor(
    private readonly config: NpmRegistryConfig,
    private readonly clock: Clock,
    private readonly logger: PluginLogger,
  ) {
    this.cache = new CacheLayout(resolvePath(config.cacheDir), clock);
    this.npm = new NpmClient({ registry: config.registry, cache: this.cache.npm, logger });
  }

  async start(): Promise<void> {
    await this.ready();
    this.logger.info(
      { cacheDir: this.cache.root, registry: this.config.registry },
      'npm package cache ready',
    );
  }

  resolve(spec: PackageSpec): Promise<ResolvedPackage> {
    return this.npm.resolve(spec.name, spec.range);
  }

  async install(resolved: ResolvedPackage, entryPoint: EntryPoint): Promise<InstalledServer> {
    const installed = await this.installPackage(resolved);
    const { path: _path, root: _root, bin: _bin, ...entry } = installed;
    return { ...entry, launch: nodeLaunch(installed, entryPoint) };
  }

  /**
   * The package in the cache, installed first when it is not there; parallel calls share one install.
   * Beyond the contract: where the package and its tree are, for tests and tools.
   */
  async installPackage(resolved: ResolvedPackage): Promise<InstalledPackage> {
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

  async cacheStatus(): Promise<CacheContents> {
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
    return { entries, bytes: entries.reduce((sum, entry) => sum + entry.sizeBytes, 0) };
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
  specVersion: 'v2',
  description:
    'npm registry: sha512-verified installs with install scripts off, into an atomic content-addressed cache',
  config: npmRegistryConfig,
  dependencies: { clock: coreServices.clock },
  provides: [provide(extensionPoints.registryKinds, 'npm')],
  create: ({ config, deps, logger }) => new NpmRegistry(config, deps.clock, logger),
});
