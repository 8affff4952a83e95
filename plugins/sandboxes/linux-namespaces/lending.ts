import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { assertTraversable, firstUnsearchable } from './host.ts';
import { lendingFstab, missingOnHost, type LentPaths, type RootPlan } from './root.ts';

/**
 * Host paths the sandbox user cannot reach by path (a directory on the way, such as a mode-700 home,
 * does not let it search). As root the runtime lends them: it binds each onto a mount point the
 * sandbox user can reach, in a mount namespace of the launch chain's own (launch.ts).
 */

/**
 * The install root itself must let the sandbox user in (it works there); the directories on the way
 * to it need not when the runtime is root, since it lends the root (pathsToLend).
 */
export function assertPackageReachable(root: string, uid: number, lends: boolean): void {
  if (!existsSync(root)) throw missingOnHost(root);
  const blocked = firstUnsearchable(root, uid);
  if (blocked && (!lends || blocked.dir === root)) {
    assertTraversable(root, uid, 'the package directory');
  }
}

/** The binds of `plan` whose source `uid` cannot reach by path, each with its mount point under `lentDir`. */
export function pathsToLend(plan: RootPlan, lentDir: string, uid: number): Map<string, string> {
  const lent = new Map<string, string>();
  for (const bind of plan.binds) {
    if (firstUnsearchable(dirname(bind.source), uid)) lent.set(bind.source, join(lentDir, String(lent.size)));
  }
  return lent;
}

/**
 * Creates the mount points that `lent` paths are bound onto (empty on the host: only the launch's
 * own mount namespace mounts on them) and the fstab that binds them.
 */
export function prepareLending(
  plan: RootPlan,
  lent: LentPaths,
  lentDir: string,
  lendingFstabFile: string,
): void {
  mkdirSync(lentDir, { mode: 0o755 });
  for (const bind of plan.binds) {
    const at = lent.get(bind.source);
    if (at === undefined) continue;
    if (bind.kind === 'dir') mkdirSync(at, { mode: 0o755 });
    else writeFileSync(at, '', { mode: 0o644 });
  }
  writeFileSync(lendingFstabFile, lendingFstab(lent), { mode: 0o600 });
}
