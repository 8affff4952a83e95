import { randomBytes } from 'node:crypto';
import { lstat, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { CacheEntry, Clock, ResolvedPackage } from '@sigil/plugin-api';
import { type Pin, repositoryKey, versionKey } from './repository.ts';

/** What an entry records about itself, in {@link ENTRY_FILE}, written last. */
export interface EntryRecord extends CacheEntry {
  layout: typeof LAYOUT;
  /** How the repository was built. */
  build: 'npm' | 'python-wheel';
  commit: string;
  tree: string;
  /** What declares code that runs at install or build time: npm scripts not run, Python build code that ran. */
  installScripts: string[];
}

/** The refs of a repository as `resolve` last saw them, for answering while it is unreachable. */
export interface SeenRefs {
  url: string;
  refs: Record<string, Pin & { seenAt: string }>;
}

export const ENTRY_FILE = 'sigil-entry.json';
const LAYOUT = 1;

/**
 * The cache's layout:
 *
 *     <root>/repos/<repo>.git        fetched objects, one shallow bare repository per URL
 *     <root>/seen/<repo>.json        the refs `resolve` last saw there, with their commit and tree
 *     <root>/entries/<repo>@<version>-<commit>/   complete installs only: they appear by a rename
 *     <root>/staging/<entry>#<host>#<pid>#<r>/    installs in progress, named after their owner
 *     <root>/npm/                    npm's content-addressable cache
 *     <root>/empty/                  an empty directory: git's HOME and hooks path
 */
export class GitCache {
  readonly repos: string;
  readonly entries: string;
  readonly staging: string;
  readonly npm: string;
  readonly empty: string;
  private readonly seen: string;

  constructor(
    readonly root: string,
    private readonly clock: Clock,
  ) {
    this.repos = join(root, 'repos');
    this.entries = join(root, 'entries');
    this.staging = join(root, 'staging');
    this.npm = join(root, 'npm');
    this.empty = join(root, 'empty');
    this.seen = join(root, 'seen');
  }

  /**
   * Creates the directories and removes installs a crash left staged: a dead process's of this host,
   * another host's (the cache may be shared) older than a day. A live process's stays.
   */
  async prepare(): Promise<string[]> {
    const dirs = [this.repos, this.entries, this.staging, this.npm, this.empty, this.seen];
    await Promise.all(dirs.map((dir) => mkdir(dir, { recursive: true })));
    const leftovers: string[] = [];
    for (const name of await readdir(this.staging)) {
      if (await this.abandoned(name)) leftovers.push(name);
    }
    await Promise.all(
      leftovers.map((name) => rm(join(this.staging, name), { recursive: true, force: true })),
    );
    return leftovers;
  }

  repository(url: string): string {
    return join(this.repos, `${repositoryKey(url)}.git`);
  }

  static key(resolved: ResolvedPackage, pin: Pin): string {
    return `${repositoryKey(resolved.name)}@${versionKey(resolved.version)}-${pin.commit.slice(0, 16)}`;
  }

  entryDir(resolved: ResolvedPackage, pin: Pin): string {
    return join(this.entries, GitCache.key(resolved, pin));
  }

  /** The entry of exactly this URL, version and digest, when complete. */
  async read(resolved: ResolvedPackage, pin: Pin): Promise<EntryRecord | undefined> {
    const record = await readJson<EntryRecord>(join(this.entryDir(resolved, pin), ENTRY_FILE));
    return record?.layout === LAYOUT &&
      record.name === resolved.name &&
      record.version === resolved.version &&
      record.digest === resolved.digest
      ? record
      : undefined;
  }

  async list(): Promise<EntryRecord[]> {
    const keys = await readdir(this.entries).catch(() => []);
    const records = await Promise.all(
      keys.map((key) => readJson<EntryRecord>(join(this.entries, key, ENTRY_FILE))),
    );
    return records.filter((record): record is EntryRecord => record?.layout === LAYOUT);
  }

  /** A fresh directory to install into, out of sight of `read` and `list`. */
  async stage(resolved: ResolvedPackage, pin: Pin): Promise<string> {
    const dir = join(
      this.staging,
      [GitCache.key(resolved, pin), ...owner(), randomBytes(4).toString('hex')].join('#'),
    );
    ownStaging.add(dir);
    await mkdir(dir, { recursive: true });
    return dir;
  }

  /**
   * Writes the record into the staged directory, then renames it into place: the entry appears whole
   * or not at all. If another install got there first, theirs is kept and this copy dropped.
   */
  async commit(staged: string, record: Omit<EntryRecord, 'layout'>, pin: Pin): Promise<EntryRecord> {
    const full: EntryRecord = { layout: LAYOUT, ...record };
    await writeFile(join(staged, ENTRY_FILE), `${JSON.stringify(full, null, 2)}\n`);
    const target = this.entryDir(record, pin);
    try {
      await rename(staged, target);
      ownStaging.delete(staged);
      return full;
    } catch (err) {
      if (!isCode(err, 'ENOTEMPTY', 'EEXIST')) throw err;
    }
    const theirs = await this.read(record, pin);
    if (theirs) {
      await this.discard(staged);
      return theirs;
    }
    // A directory without a valid record is no entry (an older layout, or left by hand): replace it.
    const aside = join(this.staging, ['replaced', ...owner(), randomBytes(4).toString('hex')].join('#'));
    ownStaging.add(aside);
    await rename(target, aside);
    await rename(staged, target);
    ownStaging.delete(staged);
    await this.discard(aside);
    return full;
  }

  async discard(staged: string): Promise<void> {
    await rm(staged, { recursive: true, force: true });
    ownStaging.delete(staged);
  }

  async readSeen(url: string): Promise<SeenRefs> {
    return (await readJson<SeenRefs>(this.seenFile(url))) ?? { url, refs: {} };
  }

  /** Through a temporary file and a rename: a crash never leaves half a record. */
  async writeSeen(seen: SeenRefs): Promise<void> {
    const file = this.seenFile(seen.url);
    const temporary = `${file}.${randomBytes(4).toString('hex')}`;
    await writeFile(temporary, `${JSON.stringify(seen, null, 2)}\n`);
    await rename(temporary, file);
  }

  private seenFile(url: string): string {
    return join(this.seen, `${repositoryKey(url)}.json`);
  }

  private async abandoned(name: string): Promise<boolean> {
    const dir = join(this.staging, name);
    const [, host, pid] = name.split('#');
    if (host === hostname() && pid !== undefined && /^\d+$/.test(pid)) return !isAlive(Number(pid), dir);
    // Another host's, or a name not ours: nothing to ask, so go by age.
    return this.clock.now().getTime() - (await lstat(dir)).mtimeMs > DAY_MS;
  }
}

const DAY_MS = 24 * 60 * 60 * 1000;

/** Who stages an install: `#` is in no key (they are made of [A-Za-z0-9._+~@-]) nor host name. */
const owner = (): [string, string] => [hostname(), String(process.pid)];

/** Staged installs of this process in progress, whichever instance made them. */
const ownStaging = new Set<string>();

function isAlive(pid: number, dir: string): boolean {
  // This pid: ours when we know the directory, else an earlier run's (pid 1 in a container, every time).
  if (pid === process.pid) return ownStaging.has(dir);
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return isCode(err, 'EPERM');
  }
}

async function readJson<T>(file: string): Promise<T | undefined> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as T;
  } catch {
    return undefined;
  }
}

/** Bytes of every file under `dir`, symlinks counted as links. */
export async function directorySize(dir: string): Promise<number> {
  let total = 0;
  for (const dirent of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, dirent.name);
    total += dirent.isDirectory() ? await directorySize(path) : (await lstat(path)).size;
  }
  return total;
}

export function isCode(err: unknown, ...codes: string[]): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && codes.includes(code);
}
