import { randomBytes } from 'node:crypto';
import { lstat, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { CacheEntry, Clock, ResolvedPackage } from '@sigil/plugin-api';

/** What an entry directory records about itself, in {@link ENTRY_FILE}. */
export interface EntryRecord extends CacheEntry {
  /** Bumped when the layout of an entry changes; entries of another layout are ignored. */
  layout: 1;
  /** `name@version` of each package in the tree that declares install scripts (none were run). */
  installScripts: string[];
  /** Packages in the installed tree, the root package included. */
  packages: number;
}

/** Written last into a staged entry; an entry directory without it is not an entry. */
export const ENTRY_FILE = 'sigil-entry.json';
const LAYOUT = 1;

/**
 * The on-disk layout of the package cache:
 *
 *     <root>/entries/<key>/      complete entries only: they appear by an atomic rename
 *     <root>/staging/<key>#<host>#<pid>#<r>/  installs in progress, named after their owner process
 *     <root>/npm/                npm's own content-addressable cache (packuments, tarballs by integrity)
 *
 * `<key>` is `<name>@<version>-<hex>`, with `/` of a scoped name turned into `+` and `<hex>` the first
 * 128 bits of the sha512 digest: the same name and version with other content is another entry.
 */
export class CacheLayout {
  readonly entries: string;
  readonly staging: string;
  readonly npm: string;

  constructor(
    readonly root: string,
    /** What the age of another host's leftovers is measured by. */
    private readonly clock: Clock,
  ) {
    this.entries = join(root, 'entries');
    this.staging = join(root, 'staging');
    this.npm = join(root, 'npm');
  }

  /**
   * Creates the directories and removes staged installs that a crash left behind: those of a dead
   * process of this host, and those of another host (the cache may be shared) older than a day.
   * A live process's install in progress is left alone.
   */
  async prepare(): Promise<string[]> {
    await Promise.all([this.entries, this.staging, this.npm].map((dir) => mkdir(dir, { recursive: true })));
    const leftovers: string[] = [];
    for (const name of await readdir(this.staging)) {
      if (await isAbandoned(join(this.staging, name), this.clock)) leftovers.push(name);
    }
    await Promise.all(
      leftovers.map((name) => rm(join(this.staging, name), { recursive: true, force: true })),
    );
    return leftovers;
  }

  static key(resolved: ResolvedPackage): string {
    return `${resolved.name.replace('/', '+')}@${resolved.version}-${digestHex(resolved.digest).slice(0, 32)}`;
  }

  entryDir(resolved: ResolvedPackage): string {
    return join(this.entries, CacheLayout.key(resolved));
  }

  /** The entry for exactly this name, version and digest, when the cache holds it complete. */
  async read(resolved: ResolvedPackage): Promise<EntryRecord | undefined> {
    const record = await readRecord(this.entryDir(resolved));
    return record?.name === resolved.name &&
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

  /** A fresh, empty directory to install into, out of sight of `read` and `list`. */
  async stage(resolved: ResolvedPackage): Promise<string> {
    const dir = join(
      this.staging,
      [CacheLayout.key(resolved), ...owner(), randomBytes(4).toString('hex')].join('#'),
    );
    ownStaging.add(dir);
    await mkdir(dir, { recursive: true });
    return dir;
  }

  /**
   * Writes the record into the staged directory, then renames it into place: the entry appears whole
   * or not at all. When another install (this process or another sharing the cache) got there
   * first, the staged copy is dropped and theirs kept. Resolves with the entry's directory.
   */
  async commit(staged: string, record: Omit<EntryRecord, 'layout'>): Promise<string> {
    const target = this.entryDir(record);
    await writeFile(join(staged, ENTRY_FILE), `${JSON.stringify({ layout: LAYOUT, ...record }, null, 2)}\n`);
    try {
      await rename(staged, target);
      ownStaging.delete(staged);
      return target;
    } catch (err) {
      if (!isCode(err, 'ENOTEMPTY', 'EEXIST')) throw err;
    }
    if (await this.read(record)) {
      await this.discard(staged);
      return target;
    }
    // A directory without a valid record is not an entry (left by hand, or an older layout): replace it.
    const aside = join(this.staging, ['replaced', ...owner(), randomBytes(4).toString('hex')].join('#'));
    ownStaging.add(aside);
    await rename(target, aside);
    await rename(staged, target);
    ownStaging.delete(staged);
    await this.discard(aside);
    return target;
  }

  async discard(staged: string): Promise<void> {
    await rm(staged, { recursive: true, force: true });
    ownStaging.delete(staged);
  }
}

/** Who stages an install: `#` appears in no key (npm names and versions exclude it) nor host name. */
const owner = (): [string, string] => [hostname(), String(process.pid)];

const DAY_MS = 24 * 60 * 60 * 1000;

async function isAbandoned(dir: string, clock: Clock): Promise<boolean> {
  const [, host, pid] = (dir.split('/').pop() ?? '').split('#');
  if (host === hostname() && pid !== undefined && /^\d+$/.test(pid)) return !isAlive(Number(pid), dir);
  // Another host's (or an unrecognisable name): nothing to ask, so go by age.
  return clock.now().getTime() - (await lstat(dir)).mtimeMs > DAY_MS;
}

/** Staged installs of this process in progress, whichever instance made them. */
const ownStaging = new Set<string>();

function isAlive(pid: number, dir: string): boolean {
  // This pid: ours when we know the directory, else an earlier run's (pid 1 in a container, every time).
  if (pid === process.pid) return ownStaging.has(dir);
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return isCode(err, 'EPERM'); // exists, owned by another user
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

/** The sha512 part of an SRI string (`sha512-<base64>`, possibly among other hashes), or undefined. */
export function sha512Of(sri: string | null | undefined): string | undefined {
  return sri
    ?.split(/\s+/)
    .map((token) => token.split('?')[0] ?? '')
    .find((token) => /^sha512-[A-Za-z0-9+/]{86}==$/.test(token));
}

/** Hex of the digest's hash bytes: what `sha512sum` prints for the same tarball. */
export function digestHex(sri: string): string {
  const sha512 = sha512Of(sri);
  // Never met: every digest is checked (checkResolved) or made sha512 (NpmClient.resolve) before.
  if (!sha512) throw new RangeError(`not a sha512 SRI digest: ${sri}`);
  return Buffer.from(sha512.slice('sha512-'.length), 'base64').toString('hex');
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
