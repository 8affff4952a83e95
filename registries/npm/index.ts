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
import { cacheContents, cacheEntryOf, installedEntry } from '@sigil/plugin-api/cache';
import { CacheLayout, type EntryRecord } from './cache.ts';
import { checkResolved, NpmClient } from './npm.ts';

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

  constructor(
    private readonly config: NpmRegistryConfig,
    private readonly clock: Clock,
    private readonly logger: PluginLogger,
  ) {
    this.cache = new CacheLayout(resolvePath(config.cacheDir), clock);
    this.npm = new NpmClient({ registry: config.registry, cache: this.cache.npm, logger });
  }

  async start(): Promise<void> {
    await this.cache.ready(this.logger);
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
    await this.cache.ready(this.logger);
    const entry = await this.cache.install(resolved, {
      build: (staged) => this.installTree(staged, resolved),
      label: `${resolved.name}@${resolved.version}`,
      logger: this.logger,
      noun: 'package',
      details: (entry) => ({
        packages: entry.packages,
        ...(entry.hasInstallScripts ? { installScriptsNotRun: entry.installScripts } : {}),
      }),
    });
    return this.installedFrom(entry);
  }

  async cacheStatus(): Promise<CacheContents> {
    await this.cache.ready(this.logger);
    return cacheContents(await this.cache.list());
  }

  /** Installs the package's tree into a staging directory; answers the entry's record. */
  private async installTree(staged: string, resolved: ResolvedPackage): Promise<Omit<EntryRecord, 'layout'>> {
    const tree = await this.npm.installTree(staged, resolved);
    const scripted = tree.installScripts.length > 0;
    return {
      ...(await installedEntry(staged, resolved, this.clock, scripted)),
      installScripts: tree.installScripts,
      packages: tree.packages,
    };
  }

  private async installedFrom(entry: EntryRecord): Promise<InstalledPackage> {
    const root = this.cache.entryDir(entry);
    const path = resolvePath(root, 'node_modules', entry.name);
    const { bin } = JSON.parse(await readFile(resolvePath(path, 'package.json'), 'utf8')) as {
      bin?: string | Record<string, string>;
    };
    return { ...cacheEntryOf(entry), path, root, bin: binPaths(entry.name, path, bin) };
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
