import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { SigilError } from '@sigil/plugin-api';
import { CgroupV1 } from './cgroups.ts';
import type { LinuxNamespacesConfig } from './config.ts';
import { Dependencies } from './dependencies.ts';
import {
  assertOwnedPrivately,
  assertTraversable,
  coreDumpsGoToPipe,
  findTools,
  someSandboxUid,
} from './host.ts';
import type { Tools } from './launch.ts';
import {
  syscallFilter,
  type FilterInterpreter,
  type SyscallFilter,
  type SyscallFilterStatus,
} from './seccomp.ts';
import { assertRangeUnused } from './uids.ts';

/**
 * What a runtime learns of its host and sets up there once, before its first sandbox: the tools and
 * what they need, the syscall filter, cgroups, and a state directory of its own.
 */

const SHELL = '/bin/sh';
/** Namespace kinds a sandbox may not create (their per-user-namespace maximum is set to 0). */
const NAMESPACE_KINDS = ['user', 'mnt', 'net', 'pid', 'ipc', 'uts', 'cgroup', 'time'];
const FORWARDER_SOURCE = fileURLToPath(new URL('./egress-forwarder.cjs', import.meta.url));

export interface PreparedHost {
  tools: Tools;
  /** Not root: the runtime's own uid, which every sandbox runs as. Root: a uid per sandbox. */
  sharedUid?: number;
  /** Installs itself, then execs the chain. */
  syscallFilter?: SyscallFilter;
  /**
   * What the chain runs after it has switched into the sandbox's root (umount, prlimit, setpriv, sh)
   * and their libraries.
   */
  chainFiles: readonly string[];
  dependencies: Dependencies;
  /** An empty directory, the self-test's package. */
  selfTestPackage: string;
  ownerDir: string;
  forwarder: string;
  namespaceLimits: string[];
  coreToPipe: boolean;
  cgroups?: CgroupV1;
  cgroupsNote?: string;
}

export interface HostOptions {
  config: LinuxNamespacesConfig;
  owner: string;
  /** Whether core dumps go to a pipe helper; read from the kernel when undefined. */
  coreToPipe: boolean | undefined;
  filterInterpreter: FilterInterpreter | undefined;
  /** Runs once the state dir is checked, before this runtime's own directory is made in it. */
  reapLeftovers: () => Promise<unknown>;
}

/** Finds the tools, checks the uid range and the state dir, reaps leftovers, makes the owner dir. */
export async function prepareHost(options: HostOptions): Promise<PreparedHost> {
  const { config } = options;
  const tools = findTools();
  if (!tools.ldd) {
    throw new SigilError('unavailable', 'the sandbox needs ldd to find the libraries of what it runs', {
      hint: 'install libc-bin (or your C library’s ldd)',
    });
  }
  const dependencies = new Dependencies(tools.ldd);
  const root = process.getuid?.() === 0;
  if (root) assertRangeUnused(config.uidRange);
  const filter =
    config.syscallFilter === 'seccomp' ? loadSyscallFilter(tools, options.filterInterpreter) : undefined;
  mkdirSync(config.stateDir, { recursive: true, mode: 0o755 });
  assertTraversable(config.stateDir, someSandboxUid(config.uidRange), 'the sandbox state dir');
  assertOwnedPrivately(config.stateDir);
  await options.reapLeftovers();
  // One directory per runtime instance, so two in one process (tests, a second plugin id) never
  // remove each other's state; the owner part is what the reaper reads.
  const ownerDir = join(config.stateDir, `${options.owner}-${randomBytes(4).toString('hex')}`);
  for (const sub of ['roots', 'spawn', 'egress'])
    mkdirSync(join(ownerDir, sub), { recursive: true, mode: 0o755 });
  // A copy in the state dir, which the sandbox user can reach wherever the code itself is installed.
  const forwarder = join(ownerDir, 'egress-forwarder.cjs');
  copyFileSync(FORWARDER_SOURCE, forwarder);
  const detected = config.cgroups === 'auto' ? CgroupV1.detect() : { unavailable: 'cgroups: off in config' };
  const coreToPipe = options.coreToPipe ?? coreDumpsGoToPipe();
  const selfTestPackage = join(ownerDir, 'self-test');
  mkdirSync(selfTestPackage, { mode: 0o755 });
  return {
    tools,
    chainFiles: await dependencies.of([
      tools.sh,
      tools.setpriv,
      tools.umount,
      ...(coreToPipe ? [tools.prlimit] : []),
      // The same shell, where system(3), popen(3) and node's `shell: true` look for it.
      ...(existsSync(SHELL) ? [SHELL] : []),
    ]),
    dependencies,
    selfTestPackage,
    ...(root ? {} : { sharedUid: someSandboxUid(config.uidRange) }),
    ...(filter ? { syscallFilter: filter } : {}),
    ownerDir,
    forwarder,
    coreToPipe,
    namespaceLimits: NAMESPACE_KINDS.map((kind) => `/proc/sys/user/max_${kind}_namespaces`).filter((file) =>
      existsSync(file),
    ),
    ...(detected instanceof CgroupV1 ? { cgroups: detected } : { cgroupsNote: detected.unavailable }),
  };
}

/** The syscall filter and its loader, or an error saying why there can be none on this host. */
function loadSyscallFilter(tools: Tools, interpreter: FilterInterpreter | undefined): SyscallFilter {
  const name = interpreter ?? (tools.perl ? 'perl' : 'python3');
  const path = tools[name];
  const filter = path ? syscallFilter({ name, path }) : undefined;
  if (!filter) {
    throw new SigilError(
      'unavailable',
      path
        ? `the sandbox syscall filter has no syscall table for ${process.arch}`
        : `the sandbox syscall filter needs ${interpreter ?? 'perl or python3'} on the host (in /usr/bin or /bin)`,
      {
        hint: 'install perl-base or python3, or set syscallFilter: off for the sandbox-linux-namespaces plugin',
      },
    );
  }
  return filter;
}

/** What the syscall filter enforces here, or why it does not (then prepareHost fails for that reason). */
export function syscallFilterStatus(
  config: LinuxNamespacesConfig,
  interpreter: FilterInterpreter | undefined,
): SyscallFilterStatus | { enforced: false; reason: string } {
  if (config.syscallFilter === 'off') return { enforced: false, reason: 'syscallFilter: off in config' };
  try {
    return loadSyscallFilter(findTools(), interpreter).status;
  } catch (error) {
    return { enforced: false, reason: (error as Error).message };
  }
}
