import { constants } from 'node:fs';
import { lstat, mkdir, open, realpath } from 'node:fs/promises';
import { join, sep } from 'node:path';
import { type CanvasFileV2, SigilError } from '@sigil/plugin-api';

/**
 * Writing into the workspace without leaving it. Paths are WORKSPACE_PATHs already (relative, no
 * `..`, no `.git`); what could still lead out is a symbolic link some earlier node or commit put in
 * the workspace, so no step of a path may be one, and the file itself is opened without following one.
 */

/** Every file's place, checked before anything is written: a refusal leaves the workspace as it was. */
export async function checkTargets(dir: string, files: readonly CanvasFileV2[]): Promise<void> {
  const root = await realpath(dir);
  for (const { path } of files) {
    const segments = path.split('/');
    for (let depth = 1; depth <= segments.length; depth += 1) {
      const step = segments.slice(0, depth).join('/');
      const stats = await lstat(join(root, step)).catch((err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return undefined;
        throw err;
      });
      if (stats === undefined) break;
      if (stats.isSymbolicLink())
        throw new SigilError('forbidden', `${step} is a symbolic link; files are written through none`, {
          details: { reason: 'symlink_in_path', path },
        });
      const last = depth === segments.length;
      if (last ? !stats.isFile() : !stats.isDirectory())
        throw new SigilError('invalid_request', `${step} is in the way of ${path}`, {
          details: { reason: 'path_in_use', path },
        });
    }
  }
}

/** Writes the files checked by checkTargets, stopping (with the signal's reason) when it aborts. */
export async function writeFiles(
  dir: string,
  files: readonly CanvasFileV2[],
  signal: AbortSignal,
): Promise<void> {
  const root = await realpath(dir);
  for (const { path, content } of files) {
    signal.throwIfAborted();
    const target = join(root, path);
    const parent = join(target, '..');
    await mkdir(parent, { recursive: true });
    // Checked again just before the write, against a link put in the way since checkTargets: the
    // folder must really be inside, and O_NOFOLLOW refuses (ELOOP) a link in place of the file.
    const real = await realpath(parent);
    if (real !== root && !real.startsWith(root + sep))
      throw new SigilError('forbidden', `${path} would be written outside the workspace`, {
        details: { reason: 'path_outside_workspace', path },
      });
    const handle = await open(
      target,
      constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW,
      0o644,
    );
    try {
      await handle.writeFile(content, 'utf8');
    } finally {
      await handle.close();
    }
  }
}
