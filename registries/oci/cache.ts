import { createHash, randomBytes } from 'node:crypto';
import { lstat, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import type { CacheEntry, Clock, ResolvedPackage } from '@sigil/plugin-api';

/** What an image directory records about itself, in {@link IMAGE_FILE}, written last. */
export interface ImageRecord {
  /** Bumped when the layout of an image directory changes; others are ignored. */
  layout: 1;
  /** `sha256:` of the image manifest: the directory's name. */
  digest: string;
  mediaType: string;
  /** `sha256:` of the config: the image id an engine gives the image once loaded. */
  config: string;
  layers: string[];
  /** `os/architecture[/variant]` of the image. */
  platform: string;
  /** The image's working directory, against which a relative entry-point path is read. */
  workingDir: string;
  /**
   * The executables on the image's PATH, which a `bin` entry point may name; null when its layers
   * could not be read here (a compression this Node lacks), and entry points are then not checked.
   * The image's files are in {@link FILES_FILE} beside.
   */
  bins: string[] | null;
  /** Bytes of the blobs. */
  sizeBytes: number;
}

/** A name and version that resolved to an image, in `refs/`. */
export type RefRecord = Omit<CacheEntry, 'sizeBytes' | 'hasInstallScripts'>;

export const IMAGE_FILE = 'sigil-image.json';
/** Every file of the image's root filesystem (see ImageFiles), when its layers could be read. */
export const FILES_FILE = 'sigil-files.json';
const LAYOUT = 1 as const;

/**
 * The image cache on disk:
 *
 *     <root>/images/<hex>/   complete image layouts, by the hex of their manifest digest; they appear
 *                            by an atomic rename, with sigil-image.json written last
 *     <root>/refs/<hash>.json  each name and version installed, and its digest
 *     <root>/staging/<owner>/  installs in progress, named after the process that owns them
 *
 * An image is stored once, however many names or tags resolved to it. A ref is written (through a
 * rename) only after its image is complete, so a ref always points at a whole image.
 */
export class ImageCache {
  readonly images: string;
  readonly refsDir: string;
  readonly staging: string;

  constructor(
    readonly root: string,
    /** What the age of another host's leftovers is measured by. */
    private readonly clock: Clock,
  ) {
    this.images = join(root, 'images');
    this.refsDir = join(root, 'refs');
    this.staging = join(root, 'staging');
  }

  /**
   * Creates the directories and removes what a crash left in staging: a dead process's of this host,
   * another host's (the cache may be shared) older than a day. A live process's install is left alone.
   */
  async prepare(): Promise<string[]> {
    await Promise.all(
      [this.images, this.refsDir, this.staging].map((dir) => mkdir(dir, { recursive: true })),
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

  imageDir(digest: string): string {
    return join(this.images, hexOf(digest));
  }

  /** The image's record, when the cache holds it complete. */
  async image(digest: string): Promise<ImageRecord | undefined> {
    const record = await readJson<ImageRecord>(join(this.imageDir(digest), IMAGE_FILE));
    return record?.layout === LAYOUT && record.digest === digest ? record : undefined;
  }

  async allImages(): Promise<ImageRecord[]> {
    const names = await readdir(this.images).catch(() => []);
    const records = await Promise.all(names.map((hex) => this.image(`sha256:${hex}`)));
    return records.filter((record): record is ImageRecord => record !== undefined);
  }

  async ref(resolved: ResolvedPackage): Promise<RefRecord | undefined> {
    const record = await readJson<RefRecord>(this.refFile(resolved));
    return record?.name === resolved.name &&
      record.version === resolved.version &&
      record.digest === resolved.digest
      ? record
      : undefined;
  }

  async allRefs(): Promise<RefRecord[]> {
    const names = await readdir(this.refsDir).catch(() => []);
    const records = await Promise.all(names.map((name) => readJson<RefRecord>(join(this.refsDir, name))));
    return records.filter((record): record is RefRecord => record !== undefined);
  }

  /** Records that `name@version` resolved to `digest`, whose image is complete; keeps a record already there. */
  async addRef(resolved: ResolvedPackage): Promise<RefRecord> {
    const known = await this.ref(resolved);
    if (known) return known;
    const record: RefRecord = {
      name: resolved.name,
      version: resolved.version,
      digest: resolved.digest,
      installedAt: this.clock.now().toISOString(),
    };
    const temporary = join(this.staging, this.ownedName('ref'));
    await writeFile(temporary, `${JSON.stringify(record, null, 2)}\n`);
    await rename(temporary, this.refFile(resolved));
    return record;
  }

  /** A fresh, empty directory to assemble an image in, out of sight of `image`. */
  async stage(digest: string): Promise<string> {
    const dir = join(this.staging, this.ownedName(hexOf(digest)));
    await mkdir(dir);
    return dir;
  }

  /**
   * Writes the record into the staged directory, then renames it into place: the image appears whole
   * or not at all. When another install got there first, the staged copy is dropped and theirs kept;
   * a directory there without a valid record (an older layout, or left by hand) is replaced.
   */
  async commit(staged: string, fields: Omit<ImageRecord, 'layout'>): Promise<ImageRecord> {
    const record: ImageRecord = { layout: LAYOUT, ...fields };
    await writeFile(join(staged, IMAGE_FILE), `${JSON.stringify(record, null, 2)}\n`);
    const target = this.imageDir(record.digest);
    try {
      await rename(staged, target);
      return record;
    } catch (err) {
      if (!isCode(err, 'ENOTEMPTY', 'EEXIST')) throw err;
    }
    const theirs = await this.image(record.digest);
    if (theirs) {
      await this.discard(staged);
      return theirs;
    }
    const aside = join(this.staging, this.ownedName('replaced'));
    await rename(target, aside);
    await rename(staged, target);
    await this.discard(aside);
    return record;
  }

  async discard(staged: string): Promise<void> {
    await rm(staged, { recursive: true, force: true });
  }

  private refFile(resolved: ResolvedPackage): string {
    const key = createHash('sha256').update(`${resolved.name}\n${resolved.version}\n${resolved.digest}`);
    return join(this.refsDir, `${key.digest('hex').slice(0, 32)}.json`);
  }

  /**
   * `<what>#<host>#<pid>#<start>#<random>`: who made a staged file, so a later run can tell a dead
   * process's from a live one's. The start time tells this process from an earlier one with the same
   * pid (pid 1 in a container, every time).
   */
  private ownedName(what: string): string {
    return [what, hostname(), process.pid, processStart(), randomBytes(4).toString('hex')].join('#');
  }

  private async isAbandoned(name: string): Promise<boolean> {
    const [, host, pid, start] = name.split('#');
    if (host !== hostname() || pid === undefined || !/^\d+$/.test(pid)) {
      // Another host's, or not ours at all: nothing to ask, so go by age.
      return this.clock.now().getTime() - (await lstat(join(this.staging, name))).mtimeMs > DAY_MS;
    }
    if (Number(pid) === process.pid) return start !== String(processStart());
    try {
      process.kill(Number(pid), 0);
      return false;
    } catch (err) {
      return !isCode(err, 'EPERM'); // EPERM: alive, another user's
    }
  }
}

const DAY_MS = 24 * 60 * 60 * 1000;

const processStart = (): number => Math.round(performance.timeOrigin);

export const hexOf = (digest: string): string => digest.slice(digest.indexOf(':') + 1);

async function readJson<T>(file: string): Promise<T | undefined> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as T;
  } catch {
    return undefined;
  }
}

export function isCode(err: unknown, ...codes: string[]): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && codes.includes(code);
}
