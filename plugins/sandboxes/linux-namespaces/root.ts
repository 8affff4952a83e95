import { createHash, randomBytes } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readlinkSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, posix } from 'node:path';
import { SigilError } from '@sigil/plugin-api';

/**
 * The sandbox's root filesystem, as bubblewrap builds one: a read-only skeleton directory holding
 * only mount points, generated `/etc` files and symlinks, onto which chosen host paths are bound
 * read-only, plus a fresh `/proc`, a noexec `/tmp` and a minimal `/dev`. The setup script mounts it
 * all with one `mount -a --fstab` and then `pivot_root`s into it.
 */

/**
 * The user and group a sandbox sees itself as, whatever host uid it runs as (the user namespace maps
 * this one id to it), so every sandbox shares one skeleton and one /etc/passwd.
 */
export const SANDBOX_ID = 1000;

/** Where the sandbox reaches the egress proxy and its forwarder, inside the sandbox. */
export const EGRESS_SOCKET = '/run/sigil/egress.sock';
export const EGRESS_FORWARDER = '/run/sigil/egress-forwarder.cjs';
/**
 * Parts of the fresh /proc that reach beyond the sandbox (kernel settings, pressure triggers, IRQ
 * and bus state), bound read-only over themselves as bubblewrap does.
 */
const PROC_READ_ONLY = ['sys', 'sysrq-trigger', 'irq', 'bus', 'pressure', 'fs'];
/** Device nodes bound from the host: nothing else of /dev (no shm, pts, tty or disks) exists inside. */
const DEVICES = ['/dev/null', '/dev/zero', '/dev/random', '/dev/urandom'];

interface Bind {
  source: string;
  /** Path inside the sandbox (and inside the skeleton). */
  target: string;
  kind: 'dir' | 'file';
  options: string;
}

/**
 * The sandbox's /tmp is a fresh tmpfs, which would hide a host path under /tmp (a package cache
 * or a test's temporary directory). Such paths are bound after the tmpfs is mounted, onto mount
 * points `mount` creates in it (X-mount.mkdir), so they stay visible and stay read-only.
 */
const inTmp = (target: string) => target.startsWith('/tmp/');

export interface RootPlan {
  /** Host paths mounted read-only, each at `target`, parents before children. */
  binds: Bind[];
  symlinks: { path: string; target: string }[];
  files: { path: string; content: string }[];
  dirs: string[];
}

export interface RootInput {
  /** System paths (e.g. /usr, /lib64 -> usr/lib64, /etc/ld.so.cache); missing ones are skipped. */
  systemPaths: readonly string[];
  /** Paths that must exist: the package, the executables, extra read-only paths. */
  requiredPaths: readonly string[];
  /** Host file of the egress forwarder, when the sandbox has an allow-list. */
  egressForwarder?: string;
  /**
   * Directories inside mounted ones that the sandbox must not see (the host's site-packages inside a
   * Python standard library): each is covered by `emptyDir`, an empty host directory. Those not on
   * the host, or not under a mounted directory, are skipped.
   */
  hidden?: { paths: readonly string[]; emptyDir: string };
}

/** As the kernel's limit on symlinks followed in one path lookup (MAXSYMLINKS). */
const MAX_SYMLINKS = 40;

/** The first symlink along `path` (absolute, normalized), and what of the path follows it. */
function firstSymlink(path: string): { path: string; rest: string } | undefined {
  const parts = path.split('/').filter(Boolean);
  for (let i = 0; i < parts.length; i++) {
    const prefix = `/${parts.slice(0, i + 1).join('/')}`;
    try {
      if (lstatSync(prefix).isSymbolicLink()) return { path: prefix, rest: parts.slice(i + 1).join('/') };
    } catch {
      return undefined; // missing: the caller's lstat says so
    }
  }
  return undefined;
}

/** Read-only binds keep `nosuid,nodev` too: no_new_privs already neuters set-uid files, this is depth. */
const RO_BIND = 'bind,ro,nosuid,nodev';
const DEVICE_BIND = 'bind,ro,nosuid,noexec';

export function planRoot(input: RootInput): RootPlan {
  const binds = new Map<string, Bind>();
  const symlinks = new Map<string, string>();

  /**
   * Makes `hostPath` resolve inside as it does on the host: each symlink on its way (`/lib` ->
   * `usr/lib`, then a library's version link) becomes the same symlink in the skeleton, and only the
   * real file or directory at the end is bound, never a whole directory a link passes through.
   */
  const add = (hostPath: string, required: boolean): void => {
    let path = posix.normalize(hostPath);
    for (let hops = 0; ; hops++) {
      const link = firstSymlink(path);
      if (!link) break;
      if (hops === MAX_SYMLINKS) {
        throw new SigilError('unavailable', `${hostPath}: too many levels of symbolic links`, {
          details: { reason: 'symlink_loop', path: hostPath },
        });
      }
      const target = readlinkSync(link.path);
      symlinks.set(link.path, target);
      path = posix.join(posix.resolve(posix.dirname(link.path), target), link.rest);
    }
    let stat;
    try {
      stat = lstatSync(path);
    } catch {
      if (required) throw missingOnHost(hostPath);
      return;
    }
    const kind = stat.isDirectory() ? 'dir' : 'file';
    binds.set(path, {
      source: path,
      target: path,
      kind,
      options: inTmp(path) ? `${RO_BIND},X-mount.mkdir` : RO_BIND,
    });
  };
  for (const path of input.systemPaths) add(path, false);
  for (const path of input.requiredPaths) add(path, true);

  // A bind under another bind is already visible through it; mounting it again would only cost time.
  const sorted = [...binds.values()].sort((a, b) => a.target.localeCompare(b.target));
  const kept: Bind[] = [];
  for (const bind of sorted) {
    if (!kept.some((parent) => bind.target.startsWith(`${parent.target}/`))) kept.push(bind);
  }
  const { paths: hidden = [], emptyDir = '' } = input.hidden ?? {};
  for (const path of hidden) {
    const target = posix.normalize(path);
    if (!kept.some((parent) => parent.kind === 'dir' && target.startsWith(`${parent.target}/`))) continue;
    if (!existsSync(target) || !lstatSync(target).isDirectory()) continue;
    kept.push({
      source: emptyDir,
      target,
      kind: 'dir',
      options: inTmp(target) ? `${RO_BIND},X-mount.mkdir` : RO_BIND,
    });
  }
  // Parents before children: a cover comes after the directory it covers.
  kept.sort((a, b) => a.target.localeCompare(b.target));
  // (A library of a package under /tmp is in its package's directory: only a file alone is refused.)
  const tmpFile = kept.find((bind) => inTmp(bind.target) && bind.kind === 'file');
  if (tmpFile) {
    throw new SigilError(
      'unavailable',
      `${tmpFile.target}: a single file under /tmp cannot be mounted in the sandbox; use its directory`,
      { details: { reason: 'file_under_tmp', path: tmpFile.target } },
    );
  }
  for (const device of DEVICES) {
    if (existsSync(device)) kept.push({ source: device, target: device, kind: 'file', options: DEVICE_BIND });
  }
  if (input.egressForwarder) {
    kept.push({ source: input.egressForwarder, target: EGRESS_FORWARDER, kind: 'file', options: RO_BIND });
  }

  const links = [...symlinks].map(([path, target]) => ({ path, target }));
  links.push(
    { path: '/dev/fd', target: '/proc/self/fd' },
    { path: '/dev/stdin', target: '/proc/self/fd/0' },
    { path: '/dev/stdout', target: '/proc/self/fd/1' },
    { path: '/dev/stderr', target: '/proc/self/fd/2' },
  );
  const covered = (path: string) => kept.some((b) => path === b.target || path.startsWith(`${b.target}/`));
  // Just enough of /etc for libc and Node (user names, localhost); never the host's own files.
  const files = [
    {
      path: '/etc/passwd',
      content: `root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:${SANDBOX_ID}:${SANDBOX_ID}:sandbox:/tmp:/usr/sbin/nologin\n`,
    },
    { path: '/etc/group', content: `root:x:0:\nsandbox:x:${SANDBOX_ID}:\n` },
    { path: '/etc/hosts', content: '127.0.0.1 localhost\n::1 localhost\n' },
    { path: '/etc/nsswitch.conf', content: 'passwd: files\ngroup: files\nhosts: files\n' },
  ].filter((file) => !covered(file.path));
  const dirs = ['/proc', '/tmp', '/.oldroot'];
  if (input.egressForwarder) files.push({ path: EGRESS_SOCKET, content: '' });
  return { binds: kept, symlinks: links, files, dirs };
}

/** Identifies a plan's skeleton, so sandboxes with the same layout share one directory. */
export function planKey(plan: RootPlan): string {
  return createHash('sha256').update(JSON.stringify(plan)).digest('hex').slice(0, 16);
}

/**
 * Creates the skeleton of `plan` under `rootsDir` (once per layout) and returns its path. It is built
 * beside its final name and renamed into place, so a half-built skeleton is never used.
 */
export function ensureSkeleton(plan: RootPlan, rootsDir: string): string {
  const root = join(rootsDir, planKey(plan));
  if (existsSync(root)) return root;
  const building = `${root}.building-${randomBytes(4).toString('hex')}`;
  try {
    mkdirSync(building, { mode: 0o755 });
    const inside = (path: string) => join(building, path);
    const parentOf = (path: string) => mkdirSafe(building, dirname(path));
    for (const dir of plan.dirs) mkdirSafe(building, dir);
    for (const bind of plan.binds) {
      if (inTmp(bind.target)) continue; // its mount point is made in the sandbox's tmpfs
      if (bind.kind === 'dir') mkdirSafe(building, bind.target);
      else {
        parentOf(bind.target);
        writeFileSync(inside(bind.target), '', { mode: 0o644 });
      }
    }
    for (const file of plan.files) {
      parentOf(file.path);
      writeFileSync(inside(file.path), file.content, { mode: 0o644 });
    }
    for (const link of plan.symlinks) {
      parentOf(link.path);
      symlinkSync(link.target, inside(link.path));
    }
    chmodSync(building, 0o755);
    renameSync(building, root);
  } catch (error) {
    rmSync(building, { recursive: true, force: true });
    if (existsSync(root)) return root; // another spawn built the same layout first
    throw error;
  }
  return root;
}

/**
 * Creates `path` (absolute inside the sandbox) under `base`, one component at a time, refusing to
 * pass through a symlink: a link in the skeleton points at the host, and following it would create
 * directories on the host.
 */
function mkdirSafe(base: string, path: string): void {
  let current = base;
  for (const part of path.split('/').filter(Boolean)) {
    current = join(current, part);
    let stat;
    try {
      stat = lstatSync(current);
    } catch {
      mkdirSync(current, { mode: 0o755 });
      continue;
    }
    if (!stat.isDirectory()) {
      throw new SigilError('unavailable', `cannot create mount point ${path}: ${part} is not a directory`, {
        details: { reason: 'mount_point_blocked', path },
      });
    }
  }
}

/** A path the sandbox needs that is not on the host (a package directory removed since it was installed). */
export const missingOnHost = (path: string): SigilError =>
  new SigilError('unavailable', `${path} does not exist on the host`, {
    details: { reason: 'path_missing', path },
  });

/** One fstab field: whitespace and backslashes are octal escapes, as getmntent(3) reads them. */
function fstabField(value: string): string {
  return value.replace(/[\s\\]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, '0')}`);
}

/**
 * Host paths of the plan that the sandbox user cannot reach by path (a directory on the way, such as
 * a mode-700 home, does not let it search), each with the host path it is lent at: an empty mount
 * point of this spawn, onto which the launch binds it as root, in a mount namespace of its own,
 * before the user switch (see launch.ts). The sandbox's own fstab then binds it from there.
 */
export type LentPaths = ReadonlyMap<string, string>;

/** The fstab that lends each path of `lent` (applied as root, before the user switch). */
export function lendingFstab(lent: LentPaths): string {
  return fstabLines([...lent].map(([source, at]) => [source, at, 'none', RO_BIND]));
}

export interface FstabInput {
  plan: RootPlan;
  /** Binds whose source the sandbox user reaches only where it was lent. */
  lent?: LentPaths;
  /** Host path of the skeleton, the new root. */
  root: string;
  /** Host path of the tmpfs holding the skeleton's copy, bound read-only onto `root`. */
  staging: string;
  tmpBytes: number;
  /** Host path of this sandbox's egress socket, when it has an allow-list. */
  egressSocket?: string;
}

/**
 * The fstab that `mount -a` applies, in order: the root (a tmpfs holding a copy of the skeleton, see
 * launch.ts) bound read-only onto itself, every read-only bind, a `/proc` of the sandbox's own PID
 * namespace (its reaching parts read-only), the private `/tmp`, binds that live under /tmp, and the
 * egress socket.
 */
export function fstab(input: FstabInput): string {
  const at = (target: string) => join(input.root, target);
  const lines: [string, string, string, string][] = [
    [input.staging, input.root, 'none', 'bind,ro,nosuid,nodev'],
  ];
  const bind = (entry: Bind) =>
    lines.push([input.lent?.get(entry.source) ?? entry.source, at(entry.target), 'none', entry.options]);
  input.plan.binds.filter((entry) => !inTmp(entry.target)).forEach(bind);
  lines.push(['proc', at('/proc'), 'proc', 'nosuid,nodev,noexec']);
  // The host's /proc has the same entries (same kernel), so it tells which exist to be covered.
  for (const entry of PROC_READ_ONLY.filter((name) => existsSync(`/proc/${name}`))) {
    lines.push([at(`/proc/${entry}`), at(`/proc/${entry}`), 'none', 'bind,ro,nosuid,nodev,noexec']);
  }
  lines.push([
    'tmpfs',
    at('/tmp'),
    'tmpfs',
    `nosuid,nodev,noexec,mode=1777,size=${input.tmpBytes},nr_inodes=${Math.max(1024, Math.floor(input.tmpBytes / 4096))}`,
  ]);
  input.plan.binds.filter((entry) => inTmp(entry.target)).forEach(bind);
  if (input.egressSocket)
    lines.push([input.egressSocket, at(EGRESS_SOCKET), 'none', 'bind,ro,nosuid,nodev,noexec']);
  return fstabLines(lines);
}

function fstabLines(lines: readonly (readonly [string, string, string, string])[]): string {
  return lines.map((fields) => `${fields.map(fstabField).join(' ')} 0 0\n`).join('');
}
