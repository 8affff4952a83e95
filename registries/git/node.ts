import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import npa from 'npm-package-arg';
import { type EntryPoint, type HostLaunch, nodeLaunch } from '@sigil/plugin-api';
import { GitRegistryError } from './errors.ts';
import { fileInside } from './entry-points.ts';
import { run, tail } from './run.ts';

/**
 * A repository with a package.json, installed as `npm ci` (with its lockfile) or `npm install`
 * (without) would, with `--omit=dev --ignore-scripts` against the configured npm registry only, and
 * started with `node` from its `bin` or a file of it.
 */

export interface NpmBuildOptions {
  /** The npm executable. */
  npm: string;
  /** Registry every dependency comes from, whatever the lockfile says. */
  registry: string;
  /** npm's content-addressable cache. */
  cache: string;
  timeoutMs: number;
}

export interface NpmBuild {
  /** `name@version` of each installed package declaring install scripts (none ran); `.` for the repository's own. */
  installScripts: string[];
  packages: number;
  lockfile: string | undefined;
}

interface PackageJson {
  name?: string;
  bin?: string | Record<string, string>;
  scripts?: Record<string, string>;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
}

interface Lockfile {
  lockfileVersion?: number;
  packages?: Record<
    string,
    { version?: string; resolved?: string; integrity?: string; link?: boolean; dev?: boolean }
  >;
}

/** What npm runs at `npm install` of a dependency; for the repository itself also what `prepare` covers. */
const INSTALL_SCRIPTS = ['preinstall', 'install', 'postinstall'];
const OWN_SCRIPTS = [...INSTALL_SCRIPTS, 'prepublish', 'preprepare', 'prepare', 'postprepare'];
const DEPENDENCY_FIELDS = [
  'dependencies',
  'devDependencies',
  'optionalDependencies',
  'peerDependencies',
] as const;
/** Lockfiles npm ci reads, by precedence. */
const LOCKFILES = ['npm-shrinkwrap.json', 'package-lock.json'];

export async function buildNpm(
  src: string,
  work: string,
  packageId: string,
  options: NpmBuildOptions,
): Promise<NpmBuild> {
  const manifest = await readPackageJson(src, packageId);
  checkDependencySpecs(manifest, packageId);
  const lockfile = LOCKFILES.find((name) => existsSync(join(src, name)));
  if (lockfile) await checkLockfile(join(src, lockfile), packageId);
  // A repository's own .npmrc would be read as project configuration: it could name another registry.
  await rm(join(src, '.npmrc'), { force: true });
  const home = join(work, 'home');
  await mkdir(home, { recursive: true });
  // Empty, so nothing of this host's npm configuration applies; npm refuses one file for both.
  const [userConfig, globalConfig] = [join(work, 'user-npmrc'), join(work, 'global-npmrc')];
  await Promise.all([writeFile(userConfig, ''), writeFile(globalConfig, '')]);
  const args = [
    lockfile ? 'ci' : 'install',
    '--omit=dev',
    '--ignore-scripts',
    '--no-audit',
    '--no-fund',
    '--no-update-notifier',
    '--no-progress',
    '--loglevel=warn',
    `--registry=${options.registry}`,
    // A lockfile's resolved URLs may name another registry: they are read as this one's.
    '--replace-registry-host=always',
    `--cache=${options.cache}`,
    `--userconfig=${userConfig}`,
    `--globalconfig=${globalConfig}`,
    `--logs-dir=${join(work, 'npm-logs')}`,
  ];
  const result = await run(options.npm, args, {
    cwd: src,
    env: {
      // npm's own `#!/usr/bin/env node` finds the node running the gateway first.
      PATH: `${dirname(process.execPath)}:${process.env.PATH ?? '/usr/bin:/bin'}`,
      HOME: home,
      TMPDIR: home,
      LC_ALL: 'C',
    },
    timeoutMs: options.timeoutMs,
  }).catch((err: unknown) => {
    throw new GitRegistryError(
      'install_failed',
      `cannot run ${options.npm} for ${packageId}: ${String(err)}`,
    );
  });
  if (result.code !== 0) throw npmFailure(result.stderr, result.timedOut, packageId, lockfile);
  return { ...(await installed(src, manifest)), lockfile };
}

async function readPackageJson(dir: string, packageId: string): Promise<PackageJson> {
  try {
    return JSON.parse(await readFile(join(dir, 'package.json'), 'utf8')) as PackageJson;
  } catch (err) {
    throw new GitRegistryError(
      'install_failed',
      `${packageId}: package.json is not readable JSON: ${String(err)}`,
    );
  }
}

/**
 * Dependencies only from the registry: a git, URL or path dependency would fetch from elsewhere (and
 * run git on behalf of the repository). Dev dependencies too: npm resolves them before omitting them.
 */
function checkDependencySpecs(manifest: PackageJson, packageId: string): void {
  const refused: string[] = [];
  for (const field of DEPENDENCY_FIELDS) {
    for (const [name, spec] of Object.entries(manifest[field] ?? {})) {
      let registry = false;
      try {
        registry = npa.resolve(name, spec, '/').registry === true;
      } catch {
        // an unsupported protocol (workspace:, link:): not a registry spec either
      }
      if (!registry) refused.push(`${field}.${name}: ${spec}`);
    }
  }
  if (refused.length > 0) {
    throw new GitRegistryError(
      'install_failed',
      `${packageId}: dependencies must come from the npm registry, not git, URLs or paths (${refused.join(', ')})`,
      { details: { refused } },
    );
  }
}

/** Every locked package comes from a registry (any host is read as the configured one) with an integrity to check. */
async function checkLockfile(file: string, packageId: string): Promise<void> {
  let lock: Lockfile;
  try {
    lock = JSON.parse(await readFile(file, 'utf8')) as Lockfile;
  } catch (err) {
    throw new GitRegistryError(
      'install_failed',
      `${packageId}: ${file} is not readable JSON: ${String(err)}`,
    );
  }
  if ((lock.lockfileVersion ?? 1) < 2 || !lock.packages) {
    throw new GitRegistryError(
      'install_failed',
      `${packageId}: lockfile version ${lock.lockfileVersion ?? 1} is not supported (npm 7 or later writes version 2 or 3)`,
    );
  }
  const refused: string[] = [];
  for (const [location, entry] of Object.entries(lock.packages)) {
    if (location === '' || !location.includes('node_modules/')) continue; // the root, or a workspace folder
    if (entry.link) {
      if (entry.resolved === undefined || entry.resolved.startsWith('..') || entry.resolved.startsWith('/'))
        refused.push(`${location}: links outside the repository`);
      continue;
    }
    if (entry.resolved !== undefined && !/^https?:\/\//.test(entry.resolved))
      refused.push(`${location}: ${entry.resolved}`);
    else if (entry.resolved !== undefined && !entry.integrity) refused.push(`${location}: no integrity`);
  }
  if (refused.length > 0) {
    throw new GitRegistryError(
      'install_failed',
      `${packageId}: the lockfile has packages that are not registry tarballs with an integrity (${refused.join(', ')})`,
      { details: { refused } },
    );
  }
}

/** npm prints `npm error code <CODE>` (`npm ERR! code` before npm 10): the one stable part of its output. */
function npmFailure(stderr: string, timedOut: boolean, packageId: string, lockfile: string | undefined) {
  const code = /npm (?:ERR!|error) code (\S+)/.exec(stderr)?.[1];
  const details = { npm: tail(stderr, 8), ...(code ? { npmCode: code } : {}) };
  const unreachable = ['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EAI_AGAIN', 'ETIMEDOUT', 'EHOSTUNREACH'];
  if (timedOut || (code && unreachable.includes(code))) {
    return new GitRegistryError('unavailable', `${packageId}: the npm registry could not be reached`, {
      details,
    });
  }
  if (code === 'EINTEGRITY') {
    return new GitRegistryError(
      'integrity_mismatch',
      `${packageId}: a dependency does not match its integrity`,
      {
        details,
      },
    );
  }
  const what = lockfile ? `npm ci (with ${lockfile})` : 'npm install';
  return new GitRegistryError('install_failed', `${packageId}: ${what} failed${code ? ` (${code})` : ''}`, {
    details,
    ...(code === 'EUSAGE' && lockfile ? { hint: `${lockfile} is not in sync with package.json` } : {}),
  });
}

/** Packages npm installed (from its hidden lockfile) and which of them declare install scripts. */
async function installed(src: string, manifest: PackageJson): Promise<Omit<NpmBuild, 'lockfile'>> {
  let packages: Lockfile['packages'] = {};
  try {
    const hidden = JSON.parse(
      await readFile(join(src, 'node_modules', '.package-lock.json'), 'utf8'),
    ) as Lockfile;
    packages = hidden.packages ?? {};
  } catch {
    // no dependency installed: npm writes no hidden lockfile
  }
  const locations = Object.keys(packages).filter((location) => location.includes('node_modules/'));
  const scripted = await Promise.all(
    locations.map(async (location) => {
      const dir = join(src, location);
      try {
        const pkg = JSON.parse(await readFile(join(dir, 'package.json'), 'utf8')) as PackageJson;
        const has =
          INSTALL_SCRIPTS.some((name) => name in (pkg.scripts ?? {})) || existsSync(join(dir, 'binding.gyp'));
        return has ? `${pkg.name ?? location}@${packages[location]?.version ?? '?'}` : undefined;
      } catch {
        return undefined;
      }
    }),
  );
  const own = OWN_SCRIPTS.some((name) => name in (manifest.scripts ?? {})) ? ['.'] : [];
  return {
    packages: locations.length,
    installScripts: [...own, ...scripted.filter((name): name is string => name !== undefined).sort()],
  };
}

/**
 * How to start `entryPoint` of an installed repository, as for any Node package (the plugin API's
 * nodeLaunch: `bin` names one of package.json's executables, `path` a file of the checkout; neither
 * takes the only executable), once the file it picked is checked: a repository's package.json or
 * links may point anywhere, so it must be a file inside the checkout.
 */
export async function checkedNodeLaunch(
  root: string,
  src: string,
  entryPoint: EntryPoint,
  resolved: { name: string; version: string },
): Promise<HostLaunch> {
  const packageId = `${resolved.name}@${resolved.version}`;
  const manifest = await readPackageJson(src, packageId);
  const bin = Object.fromEntries(
    Object.entries(binsOf(manifest)).map(([name, file]) => [name, resolve(src, file)]),
  );
  const { name, version } = resolved;
  const launch = nodeLaunch({ name, version, path: src, root, bin }, entryPoint);
  const picked = launch.args[0] as string;
  // A catalog's path as given: an absolute one is outside the checkout, not a file under it.
  await fileInside(src, entryPoint.path ?? relative(src, picked), packageId, NOT_BUILT);
  return launch;
}

const NOT_BUILT = 'registry-git runs no build script for Node: what the repository would build is not there';

/** A string `bin` is named after the package, without its scope. */
function binsOf(manifest: PackageJson): Record<string, string> {
  if (typeof manifest.bin === 'string') {
    const name = (manifest.name ?? '').split('/').pop();
    return name ? { [name]: manifest.bin } : {};
  }
  return { ...(manifest.bin ?? {}) };
}
