import { createHash } from 'node:crypto';
import { readdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { CacheEntry, Clock, ResolvedPackage } from '@sigil/plugin-api';
import { InstallCache } from '@sigil/plugin-api/cache';

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

/**
 * The image cache on disk (an InstallCache of images):
 *
 *     <root>/images/<hex>/   complete image layouts, by the hex of their manifest digest; they appear
 *                            by an atomic rename, with sigil-image.json written last
 *     <root>/refs/<hash>.json  each name and version installed, and its digest
 *     <root>/staging/<owner>/  installs in progress, named after the process that owns them
 *
 * An image is stored once, however many names or tags resolved to it. A ref is written (through a
 * rename) only after its image is complete, so a ref always points at a whole image.
 */
export class ImageCache extends InstallCache<ImageRecord, { digest: string }> {
  readonly refsDir: string;

  constructor(
    root: string,
    /** What the age of another host's leftovers is measured by, and what a ref's install time is read from. */
    private readonly clock: Clock,
  ) {
    super({
      root,
      entriesDir: 'images',
      directories: ['refs'],
      recordFile: IMAGE_FILE,
      layout: 1,
      key: (image) => hexOf(image.digest),
      matches: (record, image) => record.digest === image.digest,
      clock,
    });
    this.refsDir = join(root, 'refs');
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
    const temporary = this.temporaryPath('ref');
    await writeFile(temporary, `${JSON.stringify(record, null, 2)}\n`);
    await rename(temporary, this.refFile(resolved));
    return record;
  }

  private refFile(resolved: ResolvedPackage): string {
    const key = createHash('sha256').update(`${resolved.name}\n${resolved.version}\n${resolved.digest}`);
    return join(this.refsDir, `${key.digest('hex').slice(0, 32)}.json`);
  }
}

export const hexOf = (digest: string): string => digest.slice(digest.indexOf(':') + 1);

async function readJson<T>(file: string): Promise<T | undefined> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as T;
  } catch {
    return undefined;
  }
}
