import { realpath, stat } from 'node:fs/promises';
import { resolve, sep } from 'node:path';

/**
 * The file a preview of the workspace `dir` serves at `path` (the URL path's segments after the
 * preview's prefix, decoded), or undefined when it serves none: `index.html` for a folder (no segment,
 * or a last one empty), never a `.git`, `..` or other empty segment, never outside the workspace once
 * symlinks are resolved, and files only. The runtime's preview route and the kit's stand-in for it
 * both serve through it, so a node's contract kit opens the pages the runtime would.
 */
export async function previewFile(dir: string, path: readonly string[]): Promise<string | undefined> {
  const root = await realpath(dir).catch(() => undefined);
  if (root === undefined) return undefined;
  const wanted = path.length === 0 || path.at(-1) === '' ? [...path.filter(Boolean), 'index.html'] : path;
  if (wanted.some((segment) => segment === '.git' || segment === '..' || segment === '')) return undefined;
  const file = await realpath(resolve(root, ...wanted)).catch(() => undefined);
  if (file === undefined || !file.startsWith(root + sep) || !(await stat(file)).isFile()) return undefined;
  return file;
}
