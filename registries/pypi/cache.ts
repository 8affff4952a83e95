import { join } from 'node:path';
import type { CacheEntry, Clock, ResolvedPackage } from '@sigil/plugin-api';
import { InstallCache } from '@sigil/plugin-api/cache';
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
  layout: 1;
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

/**
 * The cache on disk (an InstallCache):
 *
 *     <root>/entries/<key>/       complete entries only, each appearing by one rename
 *         sigil-entry.json        the record, written last
 *         site/                   site-packages: the package and its dependencies (PYTHONPATH)
 *         bin/                    console-script launchers and the wheels' scripts
 *     <root>/staging/<key>#<host>#<pid>#<start>#<random>/   installs in progress, named after their owner
 *     <root>/pages/<project>.json the index's last project page, for resolving offline
 *
 * `<key>` is `<normalised name>-<version>-<first 128 bits of the sha256>`: the same version with
 * other content is another entry.
 */
export class PypiCache extends InstallCache<EntryRecord> {
  readonly pages: string;

  constructor(root: string, clock: Clock) {
    super({
      root,
      directories: ['pages'],
      recordFile: ENTRY_FILE,
      layout: 1,
      key: PypiCache.key,
      matches: (record, resolved) =>
        normalizeName(record.name) === normalizeName(resolved.name) &&
        record.version === resolved.version &&
        record.digest === resolved.digest,
      clock,
    });
    this.pages = join(root, 'pages');
  }

  static key(resolved: ResolvedPackage): string {
    return `${normalizeName(resolved.name)}-${resolved.version}-${resolved.digest.slice('sha256:'.length, 'sha256:'.length + 32)}`;
  }
}
