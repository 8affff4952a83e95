import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Arborist from '@npmcli/arborist';
import pacote, { type NpmFlatOptions } from 'pacote';
import { processTempDir, repoPath } from './paths.ts';
import { freePort } from './cli.ts';

/**
 * A real npm registry for tests: verdaccio in a child process on 127.0.0.1 and a random port, with its
 * storage in a temp directory. Packages published to it are served from it alone; everything else
 * (their dependencies) comes through it from the public registry by an uplink and is kept in its
 * storage, so installs from it see one registry, exactly as from npmjs.org.
 *
 *     const registry = await startVerdaccio({ packages: [{ spec: '@modelcontextprotocol/server-memory@2026.8.31' }] });
 *     … registry.url …
 *     await registry.stop();
 */

/** Where a package to publish comes from. */
export type PackageSource =
  /** A package of the public registry, e.g. `@modelcontextprotocol/server-memory@2026.8.31`. */
  | { spec: string }
  /** A package directory, packed as `npm pack --ignore-scripts` would. */
  | { dir: string }
  /** A tarball made earlier. */
  | { tarball: string };

export interface StartVerdaccioOptions {
  /** Published before `startVerdaccio` resolves. */
  packages?: readonly PackageSource[];
  /** Proxy packages not published here to the public registry; default true. */
  uplink?: boolean;
}

export interface PublishedPackage {
  name: string;
  version: string;
  /** `sha512-…` of the tarball, as npm computed it when packing. */
  integrity: string;
}

export interface PackedPackage extends PublishedPackage {
  /** Path of the tarball, in a temp directory of this test process. */
  tarball: string;
  /** Its package.json: the version's metadata in the publish document. */
  packageJson: Record<string, unknown>;
}

export interface Verdaccio {
  /** Registry URL with a trailing slash, e.g. `http://127.0.0.1:41234/`. */
  url: string;
  storage: string;
  published: PublishedPackage[];
  /**
   * Publishes one more package. Its name must be one given in `packages` at start, or match
   * `sigil-test-*` or `@sigil-test/*`: only those names are kept off the uplink.
   */
  publish(source: PackageSource): Promise<PublishedPackage>;
  /** The file verdaccio serves for a published version: tests tamper with it. */
  tarballPath(name: string, version: string): string;
  /**
   * Gives a published version other content and the digest that matches it, in the registry's own
   * storage (as a compromised or careless registry could; npmjs.org refuses to): what a pin guards
   * against. Returns the new integrity.
   */
  replaceVersion(source: PackageSource): Promise<string>;
  /** Stops the registry (SIGTERM, then SIGKILL after 5 s) and removes its storage. */
  stop(): Promise<void>;
}

const PUBLIC_REGISTRY = 'https://registry.npmjs.org/';
const LOCAL_PATTERNS = ['sigil-test-*', '@sigil-test/*'];
const VERDACCIO_BIN = fileURLToPath(new URL('../../node_modules/verdaccio/bin/verdaccio', import.meta.url));

const work = () => processTempDir('verdaccio');

/** npm's own cache of this machine: a public package packed once is not downloaded again. */
const NPM_CACHE = join(homedir(), '.npm', '_cacache');

/** Packing a public spec happens once per test process, however many registries publish it. */
const packedSpecs = new Map<string, Promise<PackedPackage>>();

/**
 * Makes the tarball `publish` would send, without publishing it (e.g. to swap it in as a forgery).
 * pacote packs a directory exactly as `npm pack` does (no script run), and fetches a public package's
 * tarball verified against the public registry's integrity.
 */
export async function packPackage(source: PackageSource): Promise<PackedPackage> {
  if ('spec' in source) {
    let packed = packedSpecs.get(source.spec);
    if (!packed) {
      packed = packSpec(source.spec, { registry: PUBLIC_REGISTRY, cache: NPM_CACHE });
      packedSpecs.set(source.spec, packed);
      packed.catch(() => packedSpecs.delete(source.spec));
    }
    return packed;
  }
  return packSpec(`file:${'dir' in source ? source.dir : source.tarball}`, { ignoreScripts: true, Arborist });
}

async function packSpec(spec: string, options: NpmFlatOptions): Promise<PackedPackage> {
  const [data, manifest] = await Promise.all([
    pacote.tarball(spec, options),
    pacote.manifest(spec, { ...options, fullMetadata: true }),
  ]);
  const tarball = join(
    mkdtempSync(join(work(), 'pack-')),
    `${manifest.name.replace('/', '-')}-${manifest.version}.tgz`,
  );
  writeFileSync(tarball, data);
  // What the registry stores as the version's metadata: the package.json, without pacote's `_` fields.
  const packageJson = Object.fromEntries(Object.entries(manifest).filter(([key]) => !key.startsWith('_')));
  delete packageJson.dist;
  return {
    name: manifest.name,
    version: manifest.version,
    integrity: `sha512-${createHash('sha512').update(data).digest('base64')}`,
    tarball,
    packageJson,
  };
}

function configYaml(storage: string, localNames: readonly string[], uplink: boolean): string {
  const local = (name: string) => `  '${name}':\n    access: $all\n    publish: $all\n`;
  return [
    `storage: ${JSON.stringify(storage)}`,
    `auth:\n  htpasswd:\n    file: ${JSON.stringify(join(storage, 'htpasswd'))}\n    max_users: 100`,
    uplink ? `uplinks:\n  npmjs:\n    url: ${PUBLIC_REGISTRY}\n    timeout: 30s\n    maxage: 60m` : '',
    // First match wins: published names never consult the uplink, so the registry's copy is the only one.
    `packages:\n${[...localNames, ...LOCAL_PATTERNS].map(local).join('')}  '**':\n    access: $all\n    publish: $all\n${uplink ? '    proxy: npmjs\n' : ''}`,
    'web:\n  enable: false',
    'max_body_size: 100mb',
    'log: { type: stdout, format: json, level: warn }',
  ].join('\n');
}

async function waitUntilUp(url: string, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`verdaccio exited (${child.exitCode ?? child.signalCode}): ${output()}`);
    }
    try {
      if ((await fetch(`${url}-/ping`)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new Error(`verdaccio did not answer at ${url} within 20 s: ${output()}`);
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}

/**
 * Packages that a test registry fetched through its uplink, kept when it stops and given to the next
 * one, in this process or another (parallel test files, the next run, the CLI tests' children): a
 * registry then serves a dependency tree that an earlier one already pulled without the public
 * registry (a probe server's 99 packages took 17 s through the uplink). verdaccio marks what it
 * proxied with `_uplinks` in the package's metadata; published packages never are, nor are they kept.
 * Stale metadata is refreshed through the uplink after the config's `maxage`.
 */
const uplinkCache = (): string => repoPath('node_modules', '.cache', 'sigil-verdaccio-uplink');

/** Package directories of a storage: `name/` and `@scope/name/`. */
function packageDirs(storage: string): string[] {
  if (!existsSync(storage)) return [];
  return readdirSync(storage, { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .flatMap((entry) =>
      entry.name.startsWith('@')
        ? readdirSync(join(storage, entry.name)).map((name) => `${entry.name}/${name}`)
        : [entry.name],
    );
}

function keepProxied(storage: string): void {
  for (const name of packageDirs(storage)) {
    try {
      const metadata = JSON.parse(readFileSync(join(storage, name, 'package.json'), 'utf8')) as {
        _uplinks?: Record<string, unknown>;
      };
      if (Object.keys(metadata._uplinks ?? {}).length === 0) continue;
    } catch {
      continue;
    }
    copyFilesAtomically(join(storage, name), join(uplinkCache(), name));
  }
}

/**
 * Copies each file of `from` into `to` under a temporary name and renames it into place: another
 * process seeding from `to` meanwhile reads each file whole, old or new. A tarball already there is
 * left as it is (a published version's tarball never changes); the metadata is replaced.
 */
function copyFilesAtomically(from: string, to: string): void {
  mkdirSync(to, { recursive: true });
  for (const file of readdirSync(from, { withFileTypes: true })) {
    if (!file.isFile() || (file.name.endsWith('.tgz') && existsSync(join(to, file.name)))) continue;
    const temporary = join(to, `${file.name}.${process.pid}${TEMPORARY}`);
    copyFileSync(join(from, file.name), temporary);
    renameSync(temporary, join(to, file.name));
  }
}

const TEMPORARY = '.partial';

function seedProxied(storage: string, localNames: readonly string[]): void {
  for (const name of packageDirs(uplinkCache())) {
    if (localNames.includes(name)) continue;
    const into = join(storage, name);
    try {
      cpSync(join(uplinkCache(), name), into, {
        recursive: true,
        filter: (source) => !source.endsWith(TEMPORARY),
      });
    } catch {
      // A file renamed away under the copy: this registry fetches the package through its uplink.
      rmSync(into, { recursive: true, force: true });
    }
  }
}

export async function startVerdaccio(options: StartVerdaccioOptions = {}): Promise<Verdaccio> {
  const packed = await Promise.all((options.packages ?? []).map(packPackage));
  const root = mkdtempSync(join(work(), 'registry-'));
  const storage = join(root, 'storage');
  mkdirSync(storage);
  const localNames = [...new Set(packed.map((p) => p.name))];
  const uplink = options.uplink ?? true;
  if (uplink) seedProxied(storage, localNames);
  const configFile = join(root, 'config.yaml');
  writeFileSync(configFile, configYaml(storage, localNames, uplink));

  let child: ChildProcess | undefined;
  let url = '';
  let log = '';
  const output = () => log.slice(-4000);
  // The port is free when picked but could be taken before verdaccio binds it: try a few.
  for (let attempt = 1; ; attempt += 1) {
    const port = await freePort();
    url = `http://127.0.0.1:${port}/`;
    log = '';
    child = spawn(
      process.execPath,
      [VERDACCIO_BIN, '--config', configFile, '--listen', `127.0.0.1:${port}`],
      {
        cwd: root,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    const collect = (chunk: Buffer) => {
      log = (log + chunk.toString()).slice(-16_000);
    };
    child.stdout?.on('data', collect);
    child.stderr?.on('data', collect);
    try {
      await waitUntilUp(url, child, output);
      break;
    } catch (err) {
      await stopChild(child);
      if (attempt >= 3) throw err;
    }
  }
  const process_ = child;
  const killOnExit = () => process_.kill('SIGKILL');
  process.once('exit', killOnExit);

  // verdaccio wants a user to publish: create one and publish with its token.
  const user = await fetch(`${url}-/user/org.couchdb.user:sigil`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'sigil', password: 'sigil-test-password' }),
  });
  const { token } = (await user.json()) as { token?: string };
  if (!token) throw new Error(`verdaccio refused to create a user (${user.status}): ${output()}`);

  /** The registry's publish API, with the document `npm publish` sends (libnpmpublish's format). */
  const publishPacked = async (item: PackedPackage): Promise<PublishedPackage> => {
    const data = readFileSync(item.tarball);
    const file = `${item.name.split('/').pop() ?? item.name}-${item.version}.tgz`;
    const attachment = `${item.name}-${item.version}.tgz`;
    const response = await fetch(`${url}${item.name.replace('/', '%2f')}`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({
        _id: item.name,
        name: item.name,
        'dist-tags': { latest: item.version },
        versions: {
          [item.version]: {
            ...item.packageJson,
            _id: `${item.name}@${item.version}`,
            dist: {
              integrity: item.integrity,
              shasum: createHash('sha1').update(data).digest('hex'),
              tarball: `${url}${item.name}/-/${file}`,
            },
          },
        },
        _attachments: {
          [attachment]: {
            content_type: 'application/octet-stream',
            data: data.toString('base64'),
            length: data.length,
          },
        },
      }),
    });
    if (!response.ok) {
      throw new Error(
        `publishing ${item.name}@${item.version} failed (${response.status}): ${await response.text()}`,
      );
    }
    return { name: item.name, version: item.version, integrity: item.integrity };
  };
  const published: PublishedPackage[] = [];
  for (const item of packed) published.push(await publishPacked(item));
  const tarballPath = (name: string, version: string) =>
    join(storage, name, `${name.split('/').pop() ?? name}-${version}.tgz`);

  return {
    url,
    storage,
    published,
    publish: async (source) => {
      const result = await publishPacked(await packPackage(source));
      published.push(result);
      return result;
    },
    tarballPath,
    replaceVersion: async (source) => {
      const packed = await packPackage(source);
      copyFileSync(packed.tarball, tarballPath(packed.name, packed.version));
      const metadataFile = join(storage, packed.name, 'package.json');
      const metadata = JSON.parse(readFileSync(metadataFile, 'utf8')) as {
        versions: Record<string, { dist: { integrity: string; shasum: string } }>;
      };
      const version = metadata.versions[packed.version];
      if (!version) throw new Error(`${packed.name}@${packed.version} is not published`);
      version.dist.integrity = packed.integrity;
      version.dist.shasum = createHash('sha1').update(readFileSync(packed.tarball)).digest('hex');
      writeFileSync(metadataFile, JSON.stringify(metadata));
      return packed.integrity;
    },
    stop: async () => {
      process.off('exit', killOnExit);
      await stopChild(process_);
      if (uplink) keepProxied(storage);
      rmSync(root, { recursive: true, force: true });
    },
  };
}
