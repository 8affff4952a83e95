import { createHash } from 'node:crypto';
import { lstat, readdir, readFile, readlink } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { runGit } from '../canvas/git.ts';

/**
 * What a canvas node could have changed on disk, as the kit compares it before and after a run: the
 * workspace's HEAD and `git status`, and every path under the folder that holds the workspace (so a
 * file written beside it, through `..` or a symbolic link, counts too) with its content's digest.
 */
export interface WorkspaceState {
  head: string;
  status: string;
  /** Relative path under the folder → `file <sha256>`, `dir`, `link -> <target>` or `other`. */
  entries: ReadonlyMap<string, string>;
}

/**
 * `git status` refreshes the index's stat data and may write it back, so the index is listed but its
 * content is not compared: what it records shows in `status` and `head`.
 */
const GIT_INDEX = /(^|\/)\.git\/index$/;

export async function workspaceState(root: string, dir: string): Promise<WorkspaceState> {
  const head = await runGit(dir, ['rev-parse', 'HEAD']);
  const status = await runGit(dir, ['status', '--porcelain=v1', '--untracked-files=all', '--ignored']);
  const entries = new Map<string, string>();
  const walk = async (folder: string): Promise<void> => {
    for (const name of (await readdir(folder)).sort()) {
      const path = join(folder, name);
      const key = relative(root, path);
      const stats = await lstat(path);
      if (stats.isSymbolicLink()) entries.set(key, `link -> ${await readlink(path)}`);
      else if (stats.isDirectory()) {
        entries.set(key, 'dir');
        await walk(path);
      } else if (!stats.isFile()) entries.set(key, 'other');
      else if (GIT_INDEX.test(key)) entries.set(key, 'file');
      else
        entries.set(
          key,
          `file ${createHash('sha256')
            .update(await readFile(path))
            .digest('hex')}`,
        );
    }
  };
  await walk(root);
  return { head, status, entries };
}

/** What differs from `before` to `after`, one phrase each (at most `limit`); empty when nothing did. */
export function stateChanges(before: WorkspaceState, after: WorkspaceState, limit = 5): string[] {
  const changes: string[] = [];
  if (before.head !== after.head) changes.push(`HEAD moved from ${before.head} to ${after.head}`);
  if (before.status !== after.status)
    changes.push(`git status went from ${JSON.stringify(before.status)} to ${JSON.stringify(after.status)}`);
  for (const [path, entry] of after.entries) {
    const was = before.entries.get(path);
    if (was === undefined) changes.push(`${path} appeared`);
    else if (was !== entry) changes.push(`${path} changed (${was} → ${entry})`);
  }
  for (const path of before.entries.keys()) if (!after.entries.has(path)) changes.push(`${path} disappeared`);
  return changes.length <= limit ? changes : [...changes.slice(0, limit), `${changes.length - limit} more`];
}
