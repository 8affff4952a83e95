import { existsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import { join, resolve as resolvePath } from 'node:path';
import { z } from 'zod';
import {
  type CacheContents,
  type Clock,
  coreServices,
  definePlugin,
  type EntryPoint,
  extensionPoints,
  type InstalledServer,
  isSigilError,
  type PackageRegistryV2,
  type PackageSpec,
  type PluginLifecycle,
  type PluginLogger,
  provide,
  type ResolvedPackage,
} from '@sigil/plugin-api';
import { cacheContents, cacheEntryOf, installedEntry } from '@sigil/plugin-api/cache';
import { type EntryRecord, GitCache } from './cache.ts';
import { GitRegistryError, invalidRequest } from './errors.ts';
import { Git, ObjectStore, type RemoteRef } from './git.ts';
import { buildNpm, checkedNodeLaunch } from './node.ts';
import { buildPython, pythonLaunch } from './python.ts';
import {
  checkVersion,
  formatDigest,
  parseDigest,
  type Pin,
  refRequest,
  repositoryUrl,
  SCHEMES,
  type UrlPolicy,
} from './repository.ts';

export { GitRegistryError } from './errors.ts';

export const gitRegistryConfig = z
  .object({
    cacheDir: z
      .string()
      .min(1)
      .default('data/git')
      .describe(
        'Cache of fetched objects and installed checkouts; a relative path resolves from the working directory',
      ),
    schemes: z
      .array(z.enum(SCHEMES))
      .min(1)
      .default([...SCHEMES])
      .describe('URL schemes a repository may have (git transports); ssh and ext:: are never allowed'),
    allowedUrls: z
      .array(z.url())
      .default([])
      .describe(
        'Repositories catalog entries may name: an entry ending with / allows every URL under it, any other exactly itself; empty allows any URL of an allowed scheme',
      ),
    npmRegistry: z
      .url()
      .default('https://registry.npmjs.org/')
      .describe("The npm registry a Node repository's dependencies come from, whatever its lockfile names"),
    allowBuilds: z
      .boolean()
      .default(false)
      .describe(
        "Build Python repositories into wheels: runs the repository's build backend (its setup.py, if any) on this host, outside any sandbox",
      ),
    python: z
      .string()
      .min(1)
      .default('python3')
      .describe('The Python that builds wheels (use the one sandboxes run)'),
    git: z.string().min(1).default('git').describe('The git executable'),
    npm: z.string().min(1).default('npm').describe('The npm executable'),
    gitTimeoutSeconds: z.number().int().positive().default(120).describe('Deadline of one git command'),
    buildTimeoutSeconds: z
      .number()
      .int()
      .positive()
      .default(600)
      .describe('Deadline of one npm install or Python build step'),
  })
  .strict();

export type GitRegistryConfig = z.infer<typeof gitRegistryConfig>;

/** A ref of the remote that a name picked, and what version it gives. */
interface Picked {
  ref: string;
  commit: string;
  /** A tag's version is its name; a branch's is the commit (a moved branch is a new version). */
  kind: 'tag' | 'branch';
}

/**
 * MCP servers from Git repositories: a tag, branch or commit resolved to a commit and its tree, that
 * commit checked out (verified against the tree) and built by the repository's own kind.
 */
export class GitRegistry implements PackageRegistryV2, PluginLifecycle {
  readonly specVersion = 'v2' as const;
  readonly registryKind = 'git' as const;
  readonly cache: GitCache;
  private readonly git: Git;
  private readonly policy: UrlPolicy;
  private readonly stores = new Map<string, ObjectStore>();

  constructor(
    private readonly config: GitRegistryConfig,
    private readonly clock: Clock,
    private readonly logger: PluginLogger,
  ) {
    this.cache = new GitCache(resolvePath(config.cacheDir), clock);
    this.git = new Git({
      git: config.git,
      emptyDir: this.cache.empty,
      schemes: config.schemes,
      timeoutMs: config.gitTimeoutSeconds * 1000,
    });
    this.policy = {
      schemes: config.schemes,
      allowedUrls: config.allowedUrls.map((url) => new URL(url).href),
    };
  }

  async start(): Promise<void> {
    await this.cache.ready(this.logger);
    this.logger.info(
      { cacheDir: this.cache.root, schemes: this.policy.schemes, allowBuilds: this.config.allowBuilds },
      'git repository cache ready',
    );
  }

  async stop(): Promise<void> {
    await this.cache.settled();
  }

  async resolve(spec: PackageSpec): Promise<ResolvedPackage> {
    const url = repositoryUrl(spec.name, this.policy);
    const request = refRequest(spec.range);
    await this.cache.ready(this.logger);
    const store = this.store(url);
    if (request.kind === 'commit') {
      const pin = (await store.pinOf(request.commit)) ?? (await store.fetch(request.commit));
      if (pin.commit !== request.commit) {
        throw new GitRegistryError('not_found', `${request.commit} is not a commit of ${url}`);
      }
      return { name: spec.name, version: pin.commit, digest: formatDigest(pin) };
    }
    let listed: RemoteRef[];
    try {
      listed = await store.listRefs();
    } catch (err) {
      if (isSigilError(err) && err.details?.reason === 'unavailable') {
        return this.resolveFromSeen(spec, url, store, request.name, err);
      }
      throw err;
    }
    const picked = pick(listed, request.name);
    if (!picked) {
      const names = listed
        .map(({ ref }) => /^refs\/(?:tags|heads)\/(.+?)(\^\{\})?$/.exec(ref))
        .filter((m): m is RegExpExecArray => m !== null && m[2] === undefined)
        .map((m) => m[1] as string);
      throw new GitRegistryError('not_found', `${url} has no tag or branch named ${request.name}`, {
        hint: names.length > 0 ? `It has: ${names.slice(0, 20).join(', ')}` : 'It has no tags or branches',
        details: { repository: url, ref: request.name },
      });
    }
    let pin = await store.pinOf(picked.commit);
    if (!pin) {
      pin = await store.fetch(picked.ref);
      if (pin.commit !== picked.commit) {
        this.logger.info(
          { repository: url, ref: picked.ref, listed: picked.commit, fetched: pin.commit },
          'ref moved between listing and fetching; the fetched commit is what resolves',
        );
      }
    }
    await this.remember(store, picked.ref, pin);
    const version = picked.kind === 'tag' ? request.name : pin.commit;
    this.logger.info(
      { repository: url, ref: picked.ref, version, commit: pin.commit },
      'resolved repository ref',
    );
    return { name: spec.name, version, digest: formatDigest(pin) };
  }

  async install(resolved: ResolvedPackage, entryPoint: EntryPoint): Promise<InstalledServer> {
    const url = repositoryUrl(resolved.name, this.policy);
    const pin = parseDigest(resolved.digest);
    checkVersion(resolved.version, pin);
    checkEntryPoint(entryPoint);
    await this.cache.ready(this.logger);
    const packageId = `${resolved.name}@${resolved.version}`;
    const record = await this.cache.install(resolved, {
      build: (staged) => this.installRepository(staged, resolved, url, pin),
      label: packageId,
      logger: this.logger,
      noun: 'repository',
      details: (entry) => ({
        build: entry.build,
        ...(entry.hasInstallScripts ? { installScripts: entry.installScripts } : {}),
      }),
    });
    const root = this.cache.entryDir(resolved);
    const launch =
      record.build === 'npm'
        ? await checkedNodeLaunch(root, join(root, 'src'), entryPoint, resolved)
        : await pythonLaunch(root, join(root, 'src'), entryPoint, packageId);
    return { ...cacheEntryOf(record), launch };
  }

  async cacheStatus(): Promise<CacheContents> {
    await this.cache.ready(this.logger);
    return cacheContents(await this.cache.list());
  }

  private store(url: string): ObjectStore {
    let store = this.stores.get(url);
    if (!store) {
      store = new ObjectStore(this.git, this.cache.repository(url), url);
      this.stores.set(url, store);
    }
    return store;
  }

  /** Records what a ref resolved to; a tag that now names another commit is worth a warning. */
  private remember(store: ObjectStore, ref: string, pin: Pin): Promise<void> {
    return store.exclusive(async () => {
      const seen = await this.cache.readSeen(store.url);
      const before = seen.refs[ref];
      if (before && before.commit !== pin.commit && ref.startsWith('refs/tags/')) {
        this.logger.warn(
          { repository: store.url, ref, was: formatDigest(before), now: formatDigest(pin) },
          'tag moved since it was last resolved: the same version now has another digest',
        );
      }
      seen.refs[ref] = { ...pin, seenAt: this.clock.now().toISOString() };
      await this.cache.writeSeen(seen);
    });
  }

  /** While the repository is unreachable: the refs seen at the last contact, if their commit is stored. */
  private async resolveFromSeen(
    spec: PackageSpec,
    url: string,
    store: ObjectStore,
    name: string,
    cause: unknown,
  ): Promise<ResolvedPackage> {
    const seen = await this.cache.readSeen(url);
    const candidates: [string, Picked['kind']][] = [
      [`refs/tags/${name}`, 'tag'],
      [name === 'HEAD' ? 'HEAD' : `refs/heads/${name}`, 'branch'],
    ];
    for (const [ref, kind] of candidates) {
      const known = seen.refs[ref];
      const pin = known && (await store.pinOf(known.commit));
      if (!pin) continue;
      const version = kind === 'tag' ? name : pin.commit;
      this.logger.warn(
        { repository: url, ref, version, seenAt: known.seenAt, err: (cause as Error).message },
        'repository unreachable; resolved from the refs seen at the last contact',
      );
      return { name: spec.name, version, digest: formatDigest(pin) };
    }
    throw cause;
  }

  /** Checks the pinned commit out into a staging directory, verified, and builds it; answers the entry's record. */
  private async installRepository(
    staged: string,
    resolved: ResolvedPackage,
    url: string,
    pin: Pin,
  ): Promise<Omit<EntryRecord, 'layout'>> {
    const packageId = `${resolved.name}@${resolved.version}`;
    const store = this.store(url);
    const stored = (await store.pinOf(pin.commit)) ?? (await this.fetchPinned(store, resolved, pin));
    if (stored.tree !== pin.tree) {
      throw new GitRegistryError(
        'integrity_mismatch',
        `${packageId}: commit ${pin.commit} has tree ${stored.tree}, not the pinned ${pin.tree}`,
        { details: { package: packageId, expected: resolved.digest, actual: formatDigest(stored) } },
      );
    }
    const src = join(staged, 'src');
    const work = join(staged, 'work');
    await mkdir(work);
    await store.checkout(pin, src, work);
    const built = await this.build(src, staged, work, packageId);
    await rm(work, { recursive: true, force: true });
    return {
      ...(await installedEntry(staged, resolved, this.clock, built.installScripts.length > 0)),
      commit: pin.commit,
      tree: pin.tree,
      ...built,
    };
  }

  /**
   * Fetches the pinned commit by its id. A server that refuses ids is asked for the tag instead, which
   * must still name that commit: a tag moved since it was pinned is refused, never followed.
   */
  private async fetchPinned(store: ObjectStore, resolved: ResolvedPackage, pin: Pin): Promise<Pin> {
    try {
      return await store.fetch(pin.commit);
    } catch (err) {
      const isTag = resolved.version !== pin.commit;
      if (!isTag || !isSigilError(err) || err.details?.reason !== 'not_found') throw err;
    }
    const fetched = await store.fetch(`refs/tags/${resolved.version}`);
    if (fetched.commit !== pin.commit) {
      throw new GitRegistryError(
        'integrity_mismatch',
        `${resolved.name}@${resolved.version}: the tag now names commit ${fetched.commit}, not the pinned ${pin.commit}`,
        { details: { expected: resolved.digest, actual: formatDigest(fetched) } },
      );
    }
    return fetched;
  }

  /** Builds by what the repository's root holds: package.json (npm) first, then pyproject.toml (a wheel). */
  private async build(
    src: string,
    entry: string,
    work: string,
    packageId: string,
  ): Promise<Pick<EntryRecord, 'build' | 'installScripts'>> {
    if (existsSync(join(src, 'package.json'))) {
      const npm = await buildNpm(src, work, packageId, {
        npm: this.config.npm,
        registry: this.config.npmRegistry,
        cache: this.cache.npm,
        timeoutMs: this.config.buildTimeoutSeconds * 1000,
      });
      this.logger.info(
        { package: packageId, packages: npm.packages, lockfile: npm.lockfile ?? null },
        'installed Node dependencies with install scripts off',
      );
      return { build: 'npm', installScripts: npm.installScripts };
    }
    if (existsSync(join(src, 'pyproject.toml'))) {
      if (!this.config.allowBuilds) {
        throw new GitRegistryError(
          'build_required',
          `${packageId} is a Python project: installing it builds a wheel, which runs its build backend on this host, and builds are off`,
          { hint: "Set allowBuilds: true in registry-git's options to allow Python builds" },
        );
      }
      const python = await buildPython(src, entry, work, packageId, {
        python: this.config.python,
        timeoutMs: this.config.buildTimeoutSeconds * 1000,
      });
      this.logger.info(
        { package: packageId, wheel: python.wheel, backend: python.backend },
        'built and installed wheel',
      );
      return { build: 'python-wheel', installScripts: python.installScripts };
    }
    throw new GitRegistryError(
      'install_failed',
      `${packageId}: found neither package.json (Node) nor pyproject.toml (Python) at the repository's root`,
      { hint: 'registry-git builds Node packages and Python projects with a pyproject.toml' },
    );
  }
}

/** The ref a name picks: a tag before a branch of the same name, as git itself reads names. */
function pick(listed: readonly RemoteRef[], name: string): Picked | undefined {
  const id = (ref: string) => listed.find((line) => line.ref === ref)?.id;
  const tag = `refs/tags/${name}`;
  const tagCommit = id(`${tag}^{}`) ?? id(tag);
  if (tagCommit) return { ref: tag, commit: tagCommit, kind: 'tag' };
  const branch = name === 'HEAD' ? 'HEAD' : `refs/heads/${name}`;
  const branchCommit = id(branch);
  return branchCommit ? { ref: branch, commit: branchCommit, kind: 'branch' } : undefined;
}

function checkEntryPoint(entryPoint: EntryPoint): void {
  const given = [entryPoint.bin, entryPoint.path, entryPoint.module].filter((value) => value !== undefined);
  if (given.length > 1) throw invalidRequest('an entry point names at most one of bin, path and module');
}

export default definePlugin({
  kind: 'package-registry',
  name: 'registry-git',
  specVersion: 'v2',
  description:
    'Git repositories: a tag, branch or commit pinned to a commit and its tree, checked out verified and built by its own kind (npm with scripts off, or a Python wheel)',
  config: gitRegistryConfig,
  dependencies: { clock: coreServices.clock },
  provides: [provide(extensionPoints.registryKinds, 'git')],
  create: ({ config, deps, logger }) => new GitRegistry(config, deps.clock, logger),
});
