import { randomBytes } from 'node:crypto';
import { lstat, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { CacheContents, CacheEntry, ResolvedPackage } from './contracts/index.ts';
import type { Clock, PluginLogger } from './services.ts';
import { SingleFlight } from './single-flight.ts';

/** What every entry records about itself, besides what its registry adds. */
export interface InstallRecord {
  /** Bumped by a registry when the layout of its entries changes; entries of another layout are ignored. */
  layout: number;
  /** Bytes on disk of the entry. */
  sizeBytes: number;
}

/** What an entry is installed from: something pinned by the digest of its content. */
export interface Pinned {
  digest: string;
}

export interface InstallCacheOptions<Entry extends InstallRecord, Wanted> {
  /** The cache's directory. */
  root: string;
  /** Its subdirectory of complete entries: `entries` unless given. */
  entriesDir?: string;
  /** Further subdirectories the registry keeps there (npm's own cache, say), made by `prepare`. */
  directories?: readonly string[];
  /** The file of an entry holding its record, written last: a directory without it is no entry. */
  recordFile: string;
  /** The layout this version writes. */
  layout: Entry['layout'];
  /**
   * The name of the entry's directory: the same for the same content, another for other content
   * (a digest or its prefix in it), and without `#` (staging names use it as a separator).
   */
  key: (wanted: Wanted) => string;
  /** Whether a record found under the key is the entry wanted (a key may hold only a digest's prefix). */
  matches: (record: Entry, wanted: Wanted) => boolean;
  /** What the age of another host's leftovers is measured by. */
  clock: Clock;
}

/**
 * The cache a package registry installs into, on disk, shared by every process that names the same
 * directory (on this host or, through a shared file system, others):
 *
 *     <root>/entries/<key>/          complete entries only: each appears whole, by one rename
 *         <recordFile>               its record, written last
 *     <root>/staging/<key>#<host>#<pid>#<start>#<random>/   installs in progress, named after their owner
 *
 * An install fills a staging directory and is renamed into place when complete, so a crash never
 * leaves half an entry where it is looked for; `prepare` removes what crashed installs left in
 * staging. Registries subclass it to name their keys and records and to keep files of their own.
 */
export class InstallCache<Entry extends InstallRecord & Wanted, Wanted extends Pinned = ResolvedPackage> {
  readonly entries: string;
  readonly staging: string;
  private readonly installing = new SingleFlight();
  private prepared: Promise<void> | undefined;

  constructor(private readonly options: InstallCacheOptions<Entry, Wanted>) {
    this.entries = join(options.root, options.entriesDir ?? 'entries');
    this.staging = join(options.root, 'staging');
  }

  get root(): string {
    return this.options.root;
  }

  /**
   * Creates the directories and removes the staged installs a crash left behind: those of a dead
   * process of this host, and those of another host (the cache may be shared) older than a day. A
   * live process's install in progress is left alone. Answers the names it removed.
   */
  async prepare(): Promise<string[]> {
    const directories = (this.options.directories ?? []).map((name) => join(this.options.root, name));
    await Promise.all(
      [this.entries, this.staging, ...directories].map((dir) => mkdir(dir, { recursive: true })),
    );
    const leftovers: string[] = [];
    for (const name of await readdir(this.staging)) {
      if (await this.isAbandoned(name)) leftovers.push(name);
    }
    await Promise.all(
      leftovers.map((name) => rm(join(this.staging, name), { recursive: true, force: true })),
    );
    return leftovers;
  }

  /** `prepare`, once, before the cache's first use; later calls wait for that one. Leftovers are logged. */
  ready(logger: PluginLogger): Promise<void> {
    this.prepared ??= this.prepare().then((leftovers) => {
      if (leftovers.length > 0)
        logger.warn({ leftovers }, 'removed incomplete installs left by an earlier run');
    });
    return this.prepared;
  }

  entryDir(wanted: Wanted): string {
    return join(this.entries, this.options.key(wanted));
  }

  /** The record of the complete entry wanted, when the cache holds it. */
  async read(wanted: Wanted): Promise<Entry | undefined> {
    const record = await this.recordIn(this.entryDir(wanted));
    return record && this.options.matches(record, wanted) ? record : undefined;
  }

  /** The records of every complete entry. */
  async list(): Promise<Entry[]> {
    const names = await readdir(this.entries).catch(() => []);
    const records = (await Promise.all(names.map((name) => this.recordIn(join(this.entries, name))))) as (
      Entry | undefined
    )[];
    return records.filter(
      (record, index): record is Entry =>
        record !== undefined && this.isKeyOf(record, names[index] as string),
    );
  }

  /**
   * The complete entry wanted: the cache's, read before anything could touch the network (what lets
   * a registry answer offline), or else the one `build` makes. Concurrent calls for one entry share
   * one install, and an entry another process committed meanwhile is taken as it is. `build` fills
   * a fresh staging directory and answers the entry's record, which `commit` puts in place; when
   * anything fails, nothing is kept and the call rejects. The install, its end and a failure are
   * logged, naming the package by `label`.
   */
  async install(
    wanted: Wanted,
    options: {
      build: (staged: string) => Promise<Omit<Entry, 'layout'>>;
      label: string;
      logger: PluginLogger;
      /** What the log calls an entry: `package`, `image`… */
      noun: string;
      /** What the log of a completed install tells besides its bytes and time. */
      details?: (entry: Entry) => Record<string, unknown>;
    },
  ): Promise<Entry> {
    const cached = await this.read(wanted);
    if (cached) return cached;
    return this.installing.run(this.options.key(wanted), async () => {
      // An install of the same entry may have finished while the cache was read.
      const done = await this.read(wanted);
      if (done) return done;
      const { label, logger } = options;
      const started = performance.now();
      logger.info({ package: label, digest: wanted.digest }, `installing ${options.noun}`);
      const staged = await this.stage(wanted);
      let entry: Entry;
      try {
        entry = await this.commit(staged, await options.build(staged));
      } catch (err) {
        await this.discard(staged);
        logger.warn({ package: label, err }, 'install failed; nothing was kept');
        throw err;
      }
      logger.info(
        {
          package: label,
          ...options.details?.(entry),
          bytes: entry.sizeBytes,
          ms: Math.round(performance.now() - started),
        },
        `installed ${options.noun}`,
      );
      return entry;
    });
  }

  /** Resolves once the installs of this instance in progress have ended (for a registry's `stop`). */
  settled(): Promise<void> {
    return this.installing.settled();
  }

  /** A fresh, empty directory to install into, out of sight of `read` and `list`. */
  async stage(wanted: Wanted): Promise<string> {
    const dir = this.temporaryPath(this.options.key(wanted));
    await mkdir(dir, { recursive: true });
    return dir;
  }

  /**
   * Writes the record into the staged directory, then renames it into place: the entry appears whole
   * or not at all. When another install (this process or another sharing the cache) got there first,
   * the staged copy is dropped and theirs kept; a directory there without a valid record (an older
   * layout, or left by hand) is replaced. Answers the record of the entry now in place.
   */
  async commit(staged: string, fields: Omit<Entry, 'layout'>): Promise<Entry> {
    const record = { layout: this.options.layout, ...fields } as Entry;
    await writeFile(join(staged, this.options.recordFile), `${JSON.stringify(record, null, 2)}\n`);
    const target = this.entryDir(record);
    try {
      await rename(staged, target);
      return record;
    } catch (err) {
      if (!isErrnoCode(err, 'ENOTEMPTY', 'EEXIST')) throw err;
    }
    const theirs = await this.read(record);
    if (theirs) {
      await this.discard(staged);
      return theirs;
    }
    const aside = this.temporaryPath('replaced');
    await rename(target, aside);
    await rename(staged, target);
    await this.discard(aside);
    return record;
  }

  async discard(staged: string): Promise<void> {
    await rm(staged, { recursive: true, force: true });
  }

  /**
   * A path in staging for a file or directory being written, `<what>#<host>#<pid>#<start>#<random>`:
   * named after this process, so that `prepare` tells a dead process's leftover from a live one's.
   * The start time tells this process from an earlier one with the same pid (pid 1 in a container,
   * every time).
   */
  temporaryPath(what: string): string {
    return join(
      this.staging,
      [what, hostname(), process.pid, processStart(), randomBytes(4).toString('hex')].join('#'),
    );
  }

  private async isAbandoned(name: string): Promise<boolean> {
    const [, host, pid, start] = name.split('#');
    if (host !== hostname() || pid === undefined || !/^\d+$/.test(pid)) {
      // Another host's, or not ours at all: nothing to ask, so go by age.
      return this.options.clock.now().getTime() - (await lstat(join(this.staging, name))).mtimeMs > DAY_MS;
    }
    if (Number(pid) === process.pid) return start !== String(processStart());
    try {
      process.kill(Number(pid), 0);
      return false;
    } catch (err) {
      return !isErrnoCode(err, 'EPERM'); // EPERM: alive, another user's
    }
  }

  private async recordIn(dir: string): Promise<Entry | undefined> {
    try {
      const record = JSON.parse(await readFile(join(dir, this.options.recordFile), 'utf8')) as Entry | null;
      return record?.layout === this.options.layout ? record : undefined;
    } catch {
      return undefined;
    }
  }

  /** Whether the record belongs in the directory `name`: one a read by its key would find. */
  private isKeyOf(record: Entry, name: string): boolean {
    try {
      return this.options.key(record) === name;
    } catch {
      return false; // a record its registry cannot read a key from (left by hand) is no entry
    }
  }
}

/** Whether two pins name the same package, version and content. */
export const samePackage = (a: ResolvedPackage, b: ResolvedPackage): boolean =>
  a.name === b.name && a.version === b.version && a.digest === b.digest;

/** The contract's fields of an entry, without what a registry records besides. */
export function cacheEntryOf({
  name,
  version,
  digest,
  installedAt,
  sizeBytes,
  hasInstallScripts,
}: CacheEntry): CacheEntry {
  return { name, version, digest, installedAt, sizeBytes, hasInstallScripts };
}

/**
 * The contract's fields of an entry just installed into `staged`: the pin, the time by the clock and
 * the bytes on disk, for a `build` to answer with its own fields.
 */
export async function installedEntry(
  staged: string,
  { name, version, digest }: ResolvedPackage,
  clock: Clock,
  hasInstallScripts: boolean,
): Promise<CacheEntry> {
  const installedAt = clock.now().toISOString();
  return { name, version, digest, installedAt, sizeBytes: await directorySize(staged), hasInstallScripts };
}

/**
 * What a registry's `cacheStatus` answers: its entries, by name then install time, and the bytes
 * they take, their sum unless given (entries that share storage count it once).
 */
export function cacheContents(entries: readonly CacheEntry[], bytes?: number): CacheContents {
  const listed = entries
    .map(cacheEntryOf)
    .sort((a, b) => a.name.localeCompare(b.name) || a.installedAt.localeCompare(b.installedAt));
  return { entries: listed, bytes: bytes ?? listed.reduce((sum, entry) => sum + entry.sizeBytes, 0) };
}

/** Bytes of every file under `dir`, a symlink counted as itself. */
export async function directorySize(dir: string): Promise<number> {
  let total = 0;
  for (const dirent of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, dirent.name);
    total += dirent.isDirectory() ? await directorySize(path) : (await lstat(path)).size;
  }
  return total;
}

const DAY_MS = 24 * 60 * 60 * 1000;

const processStart = (): number => Math.round(performance.timeOrigin);

function isErrnoCode(err: unknown, ...codes: string[]): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && codes.includes(code);
}
