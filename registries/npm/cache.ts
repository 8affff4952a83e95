import { join } from 'node:path';
import type { CacheEntry, Clock, ResolvedPackage } from '@sigil/plugin-api';
import { InstallCache, samePackage } from '@sigil/plugin-api/cache';

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

/**
 * The on-disk layout of the package cache (an InstallCache):
 *
 *     <root>/entries/<key>/      complete entries only: they appear by an atomic rename
 *     <root>/staging/<key>#<host>#<pid>#<start>#<r>/  installs in progress, named after their owner process
 *     <root>/npm/                npm's own content-addressable cache (packuments, tarballs by integrity)
 *
 * `<key>` is `<name>@<version>-<hex>`, with `/` of a scoped name turned into `+` and `<hex>` the first
 * 128 bits of the sha512 digest: the same name and version with other content is another entry.
 * `#` appears in no key (npm names and versions exclude it).
 */
export class CacheLayout extends InstallCache<EntryRecord> {
  readonly npm: string;

  constructor(root: string, clock: Clock) {
    super({
      root,
      directories: ['npm'],
      recordFile: ENTRY_FILE,
      layout: 1,
      key: CacheLayout.key,
      matches: samePackage,
      clock,
    });
    this.npm = join(root, 'npm');
  }

  static key(resolved: ResolvedPackage): string {
    return `${resolved.name.replace('/', '+')}@${resolved.version}-${digestHex(resolved.digest).slice(0, 32)}`;
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

export function isCode(err: unknown, ...codes: string[]): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && codes.includes(code);
}
