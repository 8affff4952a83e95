import { resolve as resolvePath } from 'node:path';
import * as pep440 from '@renovatebot/pep440';
import { z } from 'zod';
import {
  type CacheContents,
  type Clock,
  coreServices,
  definePlugin,
  type EntryPoint,
  extensionPoints,
  type Fetch,
  type InstalledServer,
  type PackageRegistryV2,
  type PackageSpec,
  type PluginLifecycle,
  type PluginLogger,
  provide,
  type ResolvedPackage,
  SigilError,
} from '@sigil/plugin-api';
import { cacheContents, cacheEntryOf, installedEntry } from '@sigil/plugin-api/cache';
import { type EntryRecord, PypiCache } from './cache.ts';
import { choose } from './distributions.ts';
import { PypiRegistryError } from './errors.ts';
import { Installer } from './installer.ts';
import { launchFor } from './launch.ts';
import { probePython, type PythonHost } from './python.ts';
import { normalizeName, PROJECT_NAME } from './requirements.ts';
import { SimpleIndex } from './simple-api.ts';

export { PypiIntegrityError, PypiRegistryError } from './errors.ts';

const MiB = 1024 * 1024;

export const pypiRegistryConfig = z
  .object({
    index: z
      .url()
      .default('https://pypi.org/simple/')
      .transform((url) => (url.endsWith('/') ? url : `${url}/`))
      .describe('Simple Repository API root (PEP 503/691), e.g. https://pypi.org/simple/'),
    fileOrigins: z
      .array(z.url())
      .optional()
      .describe(
        "Origins files may be downloaded from besides the index's own; for pypi.org, https://files.pythonhosted.org unless given",
      ),
    cacheDir: z
      .string()
      .min(1)
      .default('data/pypi')
      .describe('Cache directory; a relative path resolves from the working directory'),
    python: z
      .string()
      .min(1)
      .default('python3')
      .describe("The host's Python (command or path): the one the sandbox runs servers with"),
    timeoutSeconds: z
      .number()
      .positive()
      .default(60)
      .describe('Timeout of one request to the index, a download included'),
    maxDownloadBytes: z
      .number()
      .int()
      .positive()
      .default(256 * MiB)
      .describe('Largest file downloaded'),
    maxUnpackedBytes: z
      .number()
      .int()
      .positive()
      .default(1024 * MiB)
      .describe('Largest unpacked wheel'),
  })
  .strict();

export type PypiRegistryConfig = z.infer<typeof pypiRegistryConfig>;

/** Files of pypi.org's projects are served by its CDN, another origin. */
function defaultFileOrigins(index: string): string[] {
  return new URL(index).origin === 'https://pypi.org' ? ['https://files.pythonhosted.org'] : [];
}

const DIGEST = /^sha256:[0-9a-f]{64}$/;

/** The PyPI registry plugin: `package-registry` v2 for Python packages, installed as wheels only. */
export class PypiRegistry implements PackageRegistryV2, PluginLifecycle {
  readonly specVersion = 'v2' as const;
  readonly registryKind = 'pypi' as const;
  readonly cache: PypiCache;
  private readonly index: SimpleIndex;
  private readonly installer: Installer;
  private host: Promise<PythonHost> | undefined;

  constructor(
    private readonly config: PypiRegistryConfig,
    private readonly clock: Clock,
    fetch: Fetch,
    private readonly logger: PluginLogger,
  ) {
    this.cache = new PypiCache(resolvePath(config.cacheDir), clock);
    this.index = new SimpleIndex({
      index: config.index,
      fileOrigins: config.fileOrigins ?? defaultFileOrigins(config.index),
      fetch,
      timeoutMs: config.timeoutSeconds * 1000,
      maxDownloadBytes: config.maxDownloadBytes,
      pagesDir: this.cache.pages,
      logger,
    });
    this.installer = new Installer({
      index: this.index,
      python: config.python,
      maxUnpackedBytes: config.maxUnpackedBytes,
      logger,
    });
  }

  async start(): Promise<void> {
    await this.cache.ready(this.logger);
    this.logger.info({ cacheDir: this.cache.root, index: this.config.index }, 'PyPI package cache ready');
  }

  async resolve(spec: PackageSpec): Promise<ResolvedPackage> {
    const name = checkName(spec.name);
    const packageId = `${name} ${spec.range}`;
    await this.cache.ready(this.logger);
    const page = await this.index.project(name);
    const choice = choose(page, spec.range, await this.python(), packageId);
    return { name, version: choice.version, digest: `sha256:${choice.wheel.sha256}` };
  }

  async install(resolved: ResolvedPackage, entryPoint: EntryPoint): Promise<InstalledServer> {
    const pin = checkResolved(resolved);
    await this.cache.ready(this.logger);
    const packageId = `${pin.name}==${pin.version}`;
    const record = await this.cache
      .install(pin, {
        build: (staged) => this.installWheels(staged, pin),
        label: packageId,
        logger: this.logger,
        noun: 'package',
        details: (entry) => ({ packages: entry.distributions.map((d) => `${d.name}==${d.version}`) }),
      })
      .catch((err: unknown) => {
        throw err instanceof SigilError
          ? err
          : new PypiRegistryError('install_failed', `${packageId}: ${(err as Error).message}`, {
              package: packageId,
              cause: err,
            });
      });
    const root = this.cache.entryDir(record);
    return { ...cacheEntryOf(record), launch: launchFor(root, record, entryPoint) };
  }

  async cacheStatus(): Promise<CacheContents> {
    await this.cache.ready(this.logger);
    return cacheContents(await this.cache.list());
  }

  /** The host's Python, asked once (again after a failure, which may have been fixed since). */
  private python(): Promise<PythonHost> {
    this.host ??= probePython(this.config.python).catch((err: unknown) => {
      this.host = undefined;
      throw err;
    });
    return this.host;
  }

  /** Installs the package's wheels and their dependencies into a staging directory; answers the entry's record. */
  private async installWheels(
    staged: string,
    resolved: ResolvedPackage,
  ): Promise<Omit<EntryRecord, 'layout'>> {
    const host = await this.python();
    const tree = await this.installer.install(staged, resolved, host);
    return {
      ...(await installedEntry(staged, resolved, this.clock, false)),
      pythonCacheTag: host.cacheTag,
      ...tree,
    };
  }
}

function checkName(name: string): string {
  if (!PROJECT_NAME.test(name)) {
    throw new SigilError('invalid_request', `not a Python project name: ${JSON.stringify(name)}`);
  }
  return normalizeName(name);
}

/** A pin as `resolve` answers it: a project name, a normalised PEP 440 version and a sha256 digest. */
function checkResolved(resolved: ResolvedPackage): ResolvedPackage {
  const name = checkName(resolved.name);
  if (pep440.clean(resolved.version) !== resolved.version) {
    throw new SigilError(
      'invalid_request',
      `not a normalised PEP 440 version: ${JSON.stringify(resolved.version)}`,
    );
  }
  if (!DIGEST.test(resolved.digest)) {
    throw new SigilError(
      'invalid_request',
      `not a sha256 digest (sha256:<64 hex>): ${JSON.stringify(resolved.digest)}`,
    );
  }
  return { name, version: resolved.version, digest: resolved.digest };
}

export default definePlugin({
  kind: 'package-registry',
  name: 'registry-pypi',
  specVersion: 'v2',
  description:
    'PyPI (Simple API, PEP 691/503): sha256-verified wheels installed without pip or builds into an atomic content-addressed cache, run by the host python3',
  config: pypiRegistryConfig,
  dependencies: { clock: coreServices.clock, fetch: coreServices.fetch },
  provides: [provide(extensionPoints.registryKinds, 'pypi')],
  create: ({ config, deps, logger }) => new PypiRegistry(config, deps.clock, deps.fetch, logger),
});
