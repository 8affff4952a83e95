import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CgroupV1 } from './cgroups.ts';
import type { LinuxNamespacesConfig } from './config.ts';
import type { Dependencies } from './dependencies.ts';
import type { FilterSetup, HostFacts } from './detect-host.ts';
import { assertOwnedPrivately, assertTraversable, coreDumpsGoToPipe, someSandboxUid } from './host.ts';
import type { Tools } from './launch.ts';
import { assertRangeUnused } from './uids.ts';

/**
 * What a runtime sets up on its host once, before its first sandbox, from what it learnt of it
 * (detect-host.ts): what the chain needs, cgroups, and a state directory of its own.
 */

const SHELL = '/bin/sh';
/** Namespace kinds a sandbox may not create (their per-user-namespace maximum is set to 0). */
const NAMESPACE_KINDS = ['user', 'mnt', 'net', 'pid', 'ipc', 'uts', 'cgroup', 'time'];
const FORWARDER_SOURCE = fileURLToPath(new URL('./egress-forwarder.cjs', import.meta.url));

export interface PreparedHost {
  tools: Tools;
  /** Not root: the runtime's own uid, which every sandbox runs as. Root: a uid per sandbox. */
  sharedUid?: number;
  /** The syscall filter and what its loader needs; absent when off (`syscallFilterOff` says why). */
  syscallFilter?: FilterSetup;
  syscallFilterOff?: string;
  /**
   * What the chain runs after it has switched into the sandbox's root (umount, prlimit, setpriv, sh)
   * and their libraries.
   */
  chainFiles: readonly string[];
  dependencies: Dependencies;
  /** An empty directory: the self-test's package, and what covers a hidden directory (root.ts). */
  emptyDir: string;
  ownerDir: string;
  forwarder: string;
  namespaceLimits: string[];
  coreToPipe: boolean;
  cgroups?: CgroupV1;
  cgroupsNote?: string;
}

export interface HostOptions {
  config: LinuxNamespacesConfig;
  facts: HostFacts;
  owner: string;
  /** Whether core dumps go to a pipe helper; read from the kernel when undefined. */
  coreToPipe: boolean | undefined;
  /** Runs once the state dir is checked, before this runtime's own directory is made in it. */
  reapLeftovers: () => Promise<unknown>;
}

/** Checks the uid range and the state dir, reaps leftovers, makes the owner dir. */
export async function prepareHost(options: HostOptions): Promise<PreparedHost> {
  const { config, facts } = options;
  const { tools, dependencies } = facts;
  const root = process.getuid?.() === 0;
  if (root) assertRangeUnused(config.uidRange);
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
  const emptyDir = join(ownerDir, 'empty');
  mkdirSync(emptyDir, { mode: 0o755 });
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
    emptyDir,
    ...(root ? {} : { sharedUid: someSandboxUid(config.uidRange) }),
    ...('off' in facts.filter ? { syscallFilterOff: facts.filter.off } : { syscallFilter: facts.filter }),
    ownerDir,
    forwarder,
    coreToPipe,
    namespaceLimits: NAMESPACE_KINDS.map((kind) => `/proc/sys/user/max_${kind}_namespaces`).filter((file) =>
      existsSync(file),
    ),
    ...(detected instanceof CgroupV1 ? { cgroups: detected } : { cgroupsNote: detected.unavailable }),
  };
}
