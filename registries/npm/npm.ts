import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
// Types only: npm's libraries (about 250 ms of loading) are imported when a package is first resolved
// or installed, not when the gateway starts and serves what its cache already holds.
import type { Node, PackageJson } from '@npmcli/arborist';
import type { Manifest, NpmFlatOptions } from 'pacote';
import {
  isSigilError,
  type PackageRegistryFailure,
  type PluginLogger,
  type ResolvedPackage,
  SigilError,
} from '@sigil/plugin-api';
import { isCode, sha512Of } from './cache.ts';

/**
 * The registry side, on npm's own machinery: pacote picks versions exactly as `npm install` would,
 * and Arborist installs trees exactly as `npm install --ignore-scripts` does, verifying every tarball
 * against its packument integrity on the way.
 */

/** A registry failure with the reason the contract names, so callers need not know npm's error codes. */
export class PackageRegistryError extends SigilError {
  readonly reason: PackageRegistryFailure;
  constructor(reason: PackageRegistryFailure, message: string, details: Record<string, unknown> = {}) {
    const code = {
      integrity_mismatch: 'conflict',
      not_found: 'not_found',
      unavailable: 'unavailable',
      invalid_metadata: 'unavailable',
      install_failed: 'internal',
    } as const satisfies Record<PackageRegistryFailure, SigilError['code']>;
    super(code[reason], message, { details: { reason, ...details } });
    this.name = 'PackageRegistryError';
    this.reason = reason;
  }
}

/** Content that does not match the registry's digest; nothing of it was installed. */
export class PackageIntegrityError extends PackageRegistryError {
  constructor(packageId: string, expected: string, actual: string | undefined) {
    super(
      'integrity_mismatch',
      `integrity mismatch for ${packageId}: the registry's digest is ${expected}, the content is ${actual ?? 'different'}`,
      { package: packageId, expected, ...(actual === undefined ? {} : { actual }) },
    );
    this.name = 'PackageIntegrityError';
  }
}

/** npm package names: lowercase, optionally scoped; nothing that could be a path or a URL. */
const PACKAGE_NAME = /^(@[a-z0-9~-][a-z0-9._~-]*\/)?[a-z0-9~-][a-z0-9._~-]*$/;
/**
 * Semver ranges and dist-tags only. pacote would also take `file:`, `git+ssh:`, `github:` or URL
 * specs, which would fetch from outside the registry and skip its digest: anything with `:`, `/`,
 * `\`, `#` or `@` is refused.
 */
const REGISTRY_RANGE = /^[^:/\\#@]+$/;
const EXACT_VERSION = /^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$/;

export function checkSpec(name: string, range: string): void {
  if (!PACKAGE_NAME.test(name)) {
    throw new SigilError('invalid_request', `not an npm package name: ${JSON.stringify(name)}`);
  }
  if (!REGISTRY_RANGE.test(range.trim())) {
    throw new SigilError('invalid_request', `not a version range or tag: ${JSON.stringify(range)}`, {
      hint: 'Use a semver range (e.g. ^1.2.0), an exact version or a dist-tag such as latest',
    });
  }
}

export function checkResolved(resolved: ResolvedPackage): void {
  checkSpec(resolved.name, resolved.version);
  if (!EXACT_VERSION.test(resolved.version)) {
    throw new SigilError('invalid_request', `not an exact version: ${resolved.version}`);
  }
  if (!sha512Of(resolved.digest)) {
    throw new SigilError('invalid_request', `not a sha512 integrity digest: ${resolved.digest}`);
  }
}

/**
 * A registry request that fails on the network (a reset connection: a keep-alive socket the registry
 * closed as it was reused; a refused one) or with a 5xx is tried twice more, 100 ms then 200 ms later,
 * as npm itself retries (its fetch-retries 2) but without its 10 s minimum wait: an unreachable
 * registry still falls back to the cached metadata in well under a second. make-fetch-happen's own
 * default is no retry, which failed a verification on one "socket hang up" from a local registry.
 */
const REGISTRY_RETRY = { retries: 2, factor: 2, minTimeout: 100, maxTimeout: 1000 };

/** Failures that mean "could not reach the registry", as opposed to an answer from it. */
const NETWORK_CODES = [
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EPIPE',
  'ERR_SOCKET_TIMEOUT',
  'FETCH_ERROR',
  'ENOTCACHED',
];

function isUnreachable(err: unknown): boolean {
  const status = (err as { statusCode?: unknown } | null)?.statusCode;
  return isCode(err, ...NETWORK_CODES) || (typeof status === 'number' && status >= 500);
}

/** npm's error as a PackageRegistryError with the contract's reason; what npm does not name is `install_failed`. */
function fromNpmError(err: unknown, packageId: string): unknown {
  if (isSigilError(err)) return err;
  const message = err instanceof Error ? err.message.split('\n')[0] : String(err);
  if (isCode(err, 'EINTEGRITY')) {
    const { expected, found } = err as { expected?: unknown; found?: unknown };
    return new PackageIntegrityError(
      packageId,
      String(expected ?? 'the packument integrity'),
      found === undefined ? undefined : String(found),
    );
  }
  if (isCode(err, 'E404', 'ETARGET')) {
    return new PackageRegistryError('not_found', `${packageId}: ${message}`, { package: packageId });
  }
  if (isUnreachable(err)) {
    return new PackageRegistryError('unavailable', `registry unreachable for ${packageId}: ${message}`, {
      package: packageId,
    });
  }
  return new PackageRegistryError('install_failed', `${packageId}: ${message}`, { package: packageId });
}

export interface NpmClientOptions {
  registry: string;
  /** npm's content-addressable cache directory. */
  cache: string;
  logger: PluginLogger;
}

export interface InstalledTree {
  /** The requested package's node in the installed tree. */
  root: Node;
  packages: number;
  installScripts: string[];
}

/** Lifecycle scripts that `npm install` runs for a registry package; `prepare` is not among them. */
const INSTALL_SCRIPTS = ['preinstall', 'install', 'postinstall'];

export class NpmClient {
  private readonly base: NpmFlatOptions;

  constructor(private readonly options: NpmClientOptions) {
    this.base = { registry: options.registry, cache: options.cache, retry: REGISTRY_RETRY };
  }

  /**
   * The exact version a range or tag picks, with its sha512 integrity. Metadata is revalidated with
   * the registry; when the registry cannot be reached, the packument last seen (kept in npm's cache)
   * answers instead, so a restarted gateway still resolves what it has installed.
   */
  async resolve(name: string, range: string): Promise<ResolvedPackage> {
    checkSpec(name, range);
    const spec = `${name}@${range.trim()}`;
    const { default: pacote } = await import('pacote');
    let manifest: Manifest;
    try {
      manifest = await pacote.manifest(spec, { ...this.base, preferOnline: true });
    } catch (err) {
      if (!isUnreachable(err)) throw fromNpmError(err, spec);
      try {
        manifest = await pacote.manifest(spec, { ...this.base, offline: true });
      } catch {
        throw fromNpmError(err, spec);
      }
      this.options.logger.warn(
        { package: spec, version: manifest.version, err: (err as Error).message },
        'registry unreachable; resolved from the metadata cached at the last contact',
      );
    }
    const digest = sha512Of(manifest.dist?.integrity ?? manifest._integrity);
    if (!digest) {
      // A sha1 `shasum` alone is not a digest worth verifying against.
      throw new PackageRegistryError(
        'invalid_metadata',
        `${name}@${manifest.version} has no sha512 integrity in the registry's metadata`,
        { package: `${name}@${manifest.version}` },
      );
    }
    return { name: manifest.name, version: manifest.version, digest };
  }

  /**
   * Installs `resolved` and its dependency tree under `dir` with no lifecycle script run, then checks
   * that the root tarball was verified against `resolved.digest` itself (Arborist verifies against the
   * packument it reads now, which a registry could have changed since `resolve`).
   */
  async installTree(dir: string, resolved: ResolvedPackage): Promise<InstalledTree> {
    const packageId = `${resolved.name}@${resolved.version}`;
    await writeFile(
      join(dir, 'package.json'),
      `${JSON.stringify({ name: 'sigil-cache-entry', private: true, dependencies: { [resolved.name]: resolved.version } }, null, 2)}\n`,
    );
    const { default: Arborist } = await import('@npmcli/arborist');
    const arborist = new Arborist({
      ...this.base,
      path: dir,
      ignoreScripts: true,
      audit: false,
      fund: false,
    });
    let installed: Node;
    try {
      // save: package-lock.json records the exact tree, with the integrity of every package.
      installed = await arborist.reify({ save: true });
    } catch (err) {
      throw fromNpmError(err, packageId);
    }
    const root = installed.children.get(resolved.name);
    if (!root || root.version !== resolved.version) {
      throw new PackageRegistryError('install_failed', `${packageId} is not in the installed tree`, {
        package: packageId,
      });
    }
    if (sha512Of(root.integrity) !== sha512Of(resolved.digest)) {
      throw new PackageIntegrityError(packageId, resolved.digest, root.integrity ?? undefined);
    }
    const nodes = [...installed.inventory.values()].filter((node) => !node.isRoot && !node.isLink);
    const scripted = await Promise.all(nodes.map((node) => declaresInstallScripts(node.path)));
    return {
      root,
      packages: nodes.length,
      installScripts: nodes
        .filter((_, index) => scripted[index])
        .map((node) => `${node.packageName}@${node.version}`)
        .sort(),
    };
  }
}

/**
 * Read from the package.json on disk, not from the packument or the lockfile (which only carry a
 * `hasInstallScript` flag the registry computed). npm also runs `node-gyp rebuild` for a package
 * with a binding.gyp and no install script of its own.
 */
async function declaresInstallScripts(dir: string): Promise<boolean> {
  const { scripts = {} } = JSON.parse(await readFile(join(dir, 'package.json'), 'utf8')) as PackageJson;
  return INSTALL_SCRIPTS.some((name) => name in scripts) || existsSync(join(dir, 'binding.gyp'));
}
