import { readFile, writeFile } from 'node:fs/promises';
import { posix } from 'node:path';
import { list } from 'tar';

/**
 * The files of an image's root filesystem, read from its layers without unpacking them: enough to
 * tell whether an entry point a catalog names (a `bin` on the image's PATH, a `path`) is there.
 * Layers apply in order with the whiteouts of the image spec (`.wh.<name>` removes a lower file,
 * `.wh..wh..opq` empties a lower directory).
 */

type Kind = 'file' | 'dir' | 'symlink' | 'other';
/** `[path, kind, mode, symlink target]`, path absolute: what `sigil-files.json` holds, one per entry. */
type Row = [string, Kind, number, string?];

const WHITEOUT = '.wh.';
const OPAQUE = '.wh..wh..opq';
/** Symlinks followed in one lookup before giving up, as Linux does (ELOOP). */
const MAX_LINKS = 40;
export const DEFAULT_PATH = ['/usr/local/sbin', '/usr/local/bin', '/usr/sbin', '/usr/bin', '/sbin', '/bin'];

export class ImageFiles {
  private constructor(private readonly entries: Map<string, { kind: Kind; mode: number; target?: string }>) {}

  /** Reads the layers (tar, gzipped or not), lowest first. Rejects when one cannot be read. */
  static async ofLayers(layerFiles: readonly string[]): Promise<ImageFiles> {
    const entries = new Map<string, { kind: Kind; mode: number; target?: string }>();
    for (const file of layerFiles) {
      const added: Row[] = [];
      const hardLinks: [string, string][] = [];
      const removed: string[] = [];
      const emptied: string[] = [];
      await list({
        file,
        onReadEntry: (entry) => {
          const path = posix.resolve('/', entry.path);
          const name = posix.basename(path);
          if (name === OPAQUE) emptied.push(posix.dirname(path));
          else if (name.startsWith(WHITEOUT)) {
            removed.push(posix.join(posix.dirname(path), name.slice(WHITEOUT.length)));
          } else if (entry.type === 'Link') {
            hardLinks.push([path, posix.resolve('/', entry.linkpath ?? '')]);
          } else added.push([path, kindOf(entry.type), entry.mode ?? 0, entry.linkpath]);
        },
      });
      // A layer's whiteouts hide what the layers below it hold, never what it adds itself.
      if (removed.length > 0 || emptied.length > 0) {
        for (const path of [...entries.keys()]) {
          const hidden =
            removed.some((gone) => within(path, gone)) ||
            emptied.some((dir) => path !== dir && within(path, dir));
          if (hidden) entries.delete(path);
        }
      }
      for (const [path, kind, mode, target] of added) {
        entries.set(path, { kind, mode, ...(target ? { target } : {}) });
        // A tar need not list the directories its files are in.
        for (let dir = posix.dirname(path); dir !== '/' && !entries.has(dir); dir = posix.dirname(dir)) {
          entries.set(dir, { kind: 'dir', mode: 0o755 });
        }
      }
      for (const [path, target] of hardLinks) {
        const linked = entries.get(target);
        if (linked) entries.set(path, linked);
      }
    }
    return new ImageFiles(entries);
  }

  static async read(file: string): Promise<ImageFiles> {
    const rows = JSON.parse(await readFile(file, 'utf8')) as Row[];
    return new ImageFiles(
      new Map(
        rows.map(([path, kind, mode, target]) => [path, { kind, mode, ...(target ? { target } : {}) }]),
      ),
    );
  }

  async write(file: string): Promise<void> {
    const rows = [...this.entries].map(([path, { kind, mode, target }]): Row =>
      target === undefined ? [path, kind, mode] : [path, kind, mode, target],
    );
    await writeFile(file, JSON.stringify(rows));
  }

  /** Whether `path` (absolute) is a file of the image once symlinks are followed. */
  isFile(path: string): boolean {
    return this.resolve(path)?.kind === 'file';
  }

  /** The names of the executables in the directories of `path`, as a shell's PATH lookup finds them. */
  executables(path: readonly string[]): string[] {
    const names = new Set<string>();
    for (const dir of path) {
      const real = this.realPath(dir);
      if (real === undefined) continue;
      for (const entry of this.entries.keys()) {
        if (posix.dirname(entry) !== real) continue;
        const file = this.resolve(entry);
        if (file?.kind === 'file' && (file.mode & 0o111) !== 0) names.add(posix.basename(entry));
      }
    }
    return [...names].sort();
  }

  private resolve(path: string): { kind: Kind; mode: number } | undefined {
    const real = this.realPath(path);
    return real === undefined ? undefined : this.entries.get(real);
  }

  /** `path` with every symlink in it followed; undefined when it leads nowhere or loops. */
  private realPath(path: string): string | undefined {
    let links = 0;
    let resolved = '/';
    const pending = posix.resolve('/', path).split('/').filter(Boolean);
    while (pending.length > 0) {
      const next = posix.join(resolved, pending.shift() ?? '');
      const entry = this.entries.get(next);
      if (entry?.kind !== 'symlink' || entry.target === undefined) {
        resolved = next;
        continue;
      }
      if ((links += 1) > MAX_LINKS) return undefined;
      const target = posix.resolve(resolved, entry.target);
      pending.unshift(...target.split('/').filter(Boolean));
      resolved = '/';
    }
    return resolved === '/' || this.entries.has(resolved) ? resolved : undefined;
  }
}

const within = (path: string, dir: string) => dir === '/' || path === dir || path.startsWith(`${dir}/`);

function kindOf(type: string): Kind {
  if (type === 'File' || type === 'OldFile' || type === 'ContiguousFile') return 'file';
  if (type === 'Directory') return 'dir';
  if (type === 'SymbolicLink') return 'symlink';
  return 'other';
}
