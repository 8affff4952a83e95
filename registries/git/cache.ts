import { randomBytes } from 'node:crypto';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { CacheEntry, Clock, ResolvedPackage } from '@sigil/plugin-api';
import { InstallCache, samePackage } from '@sigil/plugin-api/cache';
import { parseDigest, type Pin, repositoryKey, versionKey } from './repository.ts';

/** What an entry records about itself, in {@link ENTRY_FILE}, written last. */
export interface EntryRecord extends CacheEntry {
  layout: 1;
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

/**
 * The cache's layout (an InstallCache, with git's objects and refs beside):
 *
 *     <root>/repos/<repo>.git        fetched objects, one shallow bare repository per URL
 *     <root>/seen/<repo>.json        the refs `resolve` last saw there, with their commit and tree
 *     <root>/entries/<repo>@<version>-<commit>/   complete installs only: they appear by a rename
 *     <root>/staging/<entry>#<host>#<pid>#<start>#<r>/   installs in progress, named after their owner
 *     <root>/npm/                    npm's content-addressable cache
 *     <root>/empty/                  an empty directory: git's HOME and hooks path
 *
 * `#` is in no entry's name (they are made of [A-Za-z0-9._+~@-]).
 */
export class GitCache extends InstallCache<EntryRecord> {
  readonly repos: string;
  readonly npm: string;
  readonly empty: string;
  private readonly seen: string;

  constructor(root: string, clock: Clock) {
    super({
      root,
      directories: ['repos', 'npm', 'empty', 'seen'],
      recordFile: ENTRY_FILE,
      layout: 1,
      key: GitCache.key,
      matches: samePackage,
      clock,
    });
    this.repos = join(root, 'repos');
    this.npm = join(root, 'npm');
    this.empty = join(root, 'empty');
    this.seen = join(root, 'seen');
  }

  repository(url: string): string {
    return join(this.repos, `${repositoryKey(url)}.git`);
  }

  /** The pinned commit is read from the digest (`git:<commit>;tree:<tree>`). */
  static key(resolved: ResolvedPackage): string {
    const pin = parseDigest(resolved.digest);
    return `${repositoryKey(resolved.name)}@${versionKey(resolved.version)}-${pin.commit.slice(0, 16)}`;
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
}

async function readJson<T>(file: string): Promise<T | undefined> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as T;
  } catch {
    return undefined;
  }
}
