import { accessSync, constants, readFileSync, realpathSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { SigilError } from '@sigil/plugin-api';
import type { Tools } from './launch.ts';
import type { UidRange } from './uids.ts';

/** What the runtime needs of the host, checked before a sandbox is built: tools, paths, permissions. */

export const DEFAULT_PATH = '/usr/local/bin:/usr/bin:/bin';
const TOOL_DIRS = ['/usr/bin', '/bin', '/usr/sbin', '/sbin'];
export function coreDumpsGoToPipe(): boolean {
  try {
    return readFileSync('/proc/sys/kernel/core_pattern', 'utf8').startsWith('|');
  } catch {
    return true; // unknown: take the way that stops a pipe helper too
  }
}
export function findTools(): Tools {
  const find = (name: string) =>
    TOOL_DIRS.map((dir) => join(dir, name)).find((path) => {
      try {
        accessSync(path, constants.X_OK);
        return true;
      } catch {
        return false;
      }
    });
  const required = {
    setpriv: 'setpriv',
    unshare: 'unshare',
    sh: 'sh',
    mount: 'mount',
    umount: 'umount',
    pivotRoot: 'pivot_root',
    prlimit: 'prlimit',
    cp: 'cp',
  };
  const found: Partial<Tools> = {};
  const missing: string[] = [];
  for (const [key, name] of Object.entries(required) as [keyof typeof required, string][]) {
    const path = find(name);
    if (path) found[key] = realpathSync(path);
    else missing.push(name);
  }
  if (missing.length > 0) {
    throw new SigilError(
      'unavailable',
      `util-linux tools not found in ${TOOL_DIRS.join(', ')}: ${missing.join(', ')}`,
      { details: { reason: 'tools_missing', missing } },
    );
  }
  const optional: Partial<Tools> = {};
  for (const name of ['ip', 'perl', 'python3', 'ldd'] as const) {
    const path = find(name);
    if (path) optional[name] = realpathSync(path);
  }
  return { ...(found as Tools), ...optional };
}

/** The real path of an executable given by its absolute path (a binary launch's `command`). */
export function resolveExecutable(command: string): string {
  try {
    accessSync(command, constants.X_OK);
    if (statSync(command).isFile()) return realpathSync(command);
  } catch {
    // refused below
  }
  throw new SigilError(
    'invalid_request',
    `sandbox spec launch.command: "${command}" is not an executable file here`,
  );
}

/**
 * Fails unless this process owns the state dir and nobody else may write to it: sandbox roots and
 * fstabs live there, and whoever could change them would choose what a sandbox mounts.
 */
export function assertOwnedPrivately(dir: string): void {
  const stat = statSync(dir);
  if (stat.uid !== process.getuid?.() || (stat.mode & 0o022) !== 0) {
    throw new SigilError(
      'unavailable',
      `the sandbox state dir ${dir} must be owned by this process's user and writable by it alone (owner ${stat.uid}, mode ${(stat.mode & 0o777).toString(8)})`,
      { hint: `chown and chmod go-w ${dir}, or choose another stateDir` },
    );
  }
}

/** A uid a sandbox may run as, for checks that any of them would pass alike. */
export function someSandboxUid(uidRange: UidRange): number {
  return process.getuid?.() === 0 ? uidRange.first : (process.getuid?.() ?? 0);
}

/**
 * The first directory on the way to `path` (itself included) that `uid` may not search, or undefined
 * when the sandbox user can reach it by path.
 */
export function firstUnsearchable(path: string, uid: number): { dir: string; mode: number } | undefined {
  let current = path;
  for (;;) {
    const stat = statSync(current);
    const bit = stat.uid === uid ? 0o100 : stat.gid === uid ? 0o010 : 0o001;
    if (!(stat.mode & bit)) return { dir: current, mode: stat.mode & 0o777 };
    const parent = dirname(current);
    if (parent === current) return undefined;
    current = parent;
  }
}

/**
 * Fails unless the sandbox user can reach `path`: every directory on the way must let it search.
 * Otherwise the sandbox would fail later with a bare EACCES from mount, which says nothing.
 */
export function assertTraversable(path: string, uid: number, what: string): void {
  const blocked = firstUnsearchable(path, uid);
  if (blocked) {
    throw new SigilError(
      'unavailable',
      `${what} ${path} is not reachable by the sandbox user ${uid}: ${blocked.dir} is mode ${blocked.mode.toString(8)}`,
      { hint: `chmod o+x ${blocked.dir}, or choose a state dir the sandbox user can reach` },
    );
  }
}
