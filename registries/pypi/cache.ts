import { randomBytes } from 'node:crypto';
import { lstat, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { CacheEntry, Clock, ResolvedPackage } from '@sigil/plugin-api';
import { normalizeName } from './requirements.ts';

/** One package of an entry: the one asked for, or a dependency it pulled in. */
export interface InstalledDistribution {
  name: string;
  version: string;
  /** `sha256:<hex>` of the wheel, as the index listed it and as verified. */
  digest: string;
  wheel: string;
}

/** What an entry records about itself, in {@link ENTRY_FILE}, written last. */
export interface EntryRecord extends CacheEntry {
  layout: typeof LAYOUT;
  /** The package and its dependencies, in install order. */
  distributions: InstalledDistribution[];
  /** Console scripts by name: `module:attribute`, the package's own first. */
  consoleScripts: Record<string, string>;
  /** Console scripts of the package itself (not of its dependencies). */
  ownScripts: string[];
  /** Files of the wheels' `.data/scripts`, by name. */
  scripts: string[];
  /** The bytecode tag of the Python it was installed for (`cpython-311`). */
  pythonCacheTag: string;
}

export const ENTRY_FILE = 'sigil-entry.json';
const LAYOUT = 1;
const DAY_MS = 24 * 60 * 60 * 1000;

/**
 * The cache on disk:
 *
 *     <root>/entries/<key>/       complete entries only, each appearing by one rename
 *         sigil-entry.json        the record, written last
 *         site/                   site-packages: the package and its dependencies (PYTHONPATH)
 *         bin/                    console-script launchers and the wheels' scripts
 *     <root>/staging/<key>#<host>#<pid>#<random>/   installs in progress, named after their owner
 *     <root>/pages/<project>.json the index's last project page, for resolving offline
 *
 * `<key>` is `<normalised name>-<version>-<first 128 bits of the sha256>`: the same version with
 * other content is another entry.
 */
export class PypiCache {
  readonly entries: string;
  readonly staging: string;
  readonly pages: string;

  constructor(
    readonly root: string,
    private readonly clock: Clock,
  ) {
    this.entries = join(root, 'entries');
    this.staging = join(root, 'staging');
    this.pages = join(root, 'pages');
  }

  static key(resolved: ResolvedPackage): string {
    return `${normalizeName(resolved.name)}-${resolved.version}-${resolved.digest.slice('sha256:'.length, 'sha256:'.length + 32)}`;
  }

  entryDir(resolved: ResolvedPackage): string {
    return join(this.entries, PypiCache.key(resolved));
  }

  /**
   * Creates the directories and deletes what crashed installs left in staging: a dead process's of
   * this host, or another host's older than a day (the cache may be shared). Answers what it deleted.
   */
  async prepare(): Promise<string[]> {
    await Promise.all([this.entries, this.staging, this.pages].map((dir) => mkdir(dir, { recursive: true })));
    const leftovers: string[] = [];
    for (const name of await readdir(this.staging)) {
      const [, host, pid] = name.split('#');
      const abandoned =
        host === hostname() && pid !== undefined && /^\d+$/.test(pid)
          ? !isAlive(Number(pid), join(this.staging, name))
          : this.clock.now().getTime() - (await lstat(join(this.staging, name))).mtimeMs > DAY_MS;
      if (abandoned) leftovers.push(name);
    }
    await Promise.all(
      leftovers.map((name) => rm(join(this.staging, name), { recursive: true, force: true })),
    );
    return leftovers;
  }

  /** The complete entry for exactly this name, version and digest, or undefined. */
  async read(resolved: ResolvedPackage): Promise<EntryRecord | undefined> {
    const record = await readRecord(this.entryDir(resolved));
    return record &&
      normalizeName(record.name) === normalizeName(resolved.name) &&
      record.version === resolved.version &&
      record.digest === resolved.digest
      ? record
      : undefined;
  }

  async list(): Promise<EntryRecord[]> {
    const keys = await readdir(this.entries).catch(() => []);
    const records = await Promise.all(keys.map((key) => readRecord(join(this.entries, key))));
    return records.filter((record): record is EntryRecord => record !== undefined);
  }

  /** A new empty directory, out of sight of `read` and `list`, to install into. */
  async stage(resolved: ResolvedPackage): Promise<string> {
    const dir = join(
      this.staging,
      [PypiCache.key(resolved), hostname(), process.pid, randomBytes(4).toString('hex')].join('#'),
    );
    ownStaging.add(dir);
    await mkdir(dir, { recursive: true });
    return dir;
  }

  /**
   * Writes the record into the staged directory, then renames it into `entries/`: the entry appears
   * whole or not at all. When another install got there first, its entry is kept and this copy
   * dropped; a directory there without a valid record (left by hand) is replaced.
   */
  async commit(staged: string, record: Omit<EntryRecord, 'layout'>): Promise<void> {
    const target = this.entryDir(record);
    await writeFile(join(staged, ENTRY_FILE), `${JSON.stringify({ layout: LAYOUT, ...record }, null, 2)}\n`);
    try {
      await rename(staged, target);
      ownStaging.delete(staged);
      return;
    } catch (err) {
      if (!['ENOTEMPTY', 'EEXIST'].includes((err as NodeJS.ErrnoException).code ?? '')) throw err;
    }
    if (await this.read(record)) return this.discard(staged);
    const aside = await this.stage(record);
    await rm(aside, { recursive: true });
    await rename(target, aside);
    await rename(staged, target);
    ownStaging.delete(staged);
    await this.discard(aside);
  }

  async discard(staged: string): Promise<void> {
    await rm(staged, { recursive: true, force: true });
    ownStaging.delete(staged);
  }
}

/** Staged installs of this process in progress (pid 1 in a container is this process on every run). */
const ownStaging = new Set<string>();

function isAlive(pid: number, dir: string): boolean {
  if (pid === process.pid) return ownStaging.has(dir);
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function readRecord(dir: string): Promise<EntryRecord | undefined> {
  try {
    const record = JSON.parse(await readFile(join(dir, ENTRY_FILE), 'utf8')) as Partial<EntryRecord>;
    return record.layout === LAYOUT ? (record as EntryRecord) : undefined;
  } catch {
    return undefined;
  }
}

/** Bytes of every file under `dir`, a link counted as itself. */
export async function directorySize(dir: string): Promise<number> {
  let total = 0;
  for (const dirent of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, dirent.name);
    total += dirent.isDirectory() ? await directorySize(path) : (await lstat(path)).size;
  }
  return total;
}
