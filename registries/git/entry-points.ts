import { realpath, stat } from 'node:fs/promises';
import { relative, resolve, sep } from 'node:path';
import type { EntryPoint } from '@sigil/plugin-api';
import { GitRegistryError } from './errors.ts';

/** What the catalog asked for, as a message names it. */
function asked(entryPoint: EntryPoint): string {
  if (entryPoint.bin !== undefined) return `executable "${entryPoint.bin}"`;
  if (entryPoint.path !== undefined) return `file "${entryPoint.path}"`;
  if (entryPoint.module !== undefined) return `module "${entryPoint.module}"`;
  return 'a default entry point';
}

/** The contract's `not_found` for an entry point, its hint listing those the package has. */
export function noSuchEntryPoint(
  packageId: string,
  entryPoint: EntryPoint,
  available: readonly string[],
  where: string,
): GitRegistryError {
  const ambiguous = entryPoint.bin === undefined && entryPoint.path === undefined && available.length > 1;
  return new GitRegistryError(
    'not_found',
    ambiguous
      ? `${packageId} has several entry points (${where}): name one`
      : `${packageId} has no ${asked(entryPoint)} (${where})`,
    {
      hint: available.length > 0 ? `It has: ${available.join(', ')}` : `It declares none in ${where}`,
      details: { available },
    },
  );
}

/**
 * The absolute path of `file` inside `root`, when it is a regular file there once symlinks are
 * followed: a catalog entry or a package.json cannot point a runtime at something outside the install.
 */
export async function fileInside(
  root: string,
  file: string,
  packageId: string,
  hint?: string,
): Promise<string> {
  const missing = (why: string) =>
    new GitRegistryError('not_found', `${packageId}: ${file} ${why}`, { hint, details: { file } });
  const path = resolve(root, file);
  let real: string;
  try {
    real = await realpath(path);
  } catch {
    throw missing('does not exist in the repository');
  }
  const inside = relative(await realpath(root), real);
  if (inside === '' || inside.startsWith(`..${sep}`) || inside === '..' || resolve(inside) === inside) {
    throw missing('is outside the repository');
  }
  if (!(await stat(real)).isFile()) throw missing('is not a file');
  return path;
}
