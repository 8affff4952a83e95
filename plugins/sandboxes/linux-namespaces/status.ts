import type { SandboxStatus } from '@sigil/plugin-api';
import { CgroupV1 } from './cgroups.ts';
import type { LinuxNamespacesConfig } from './config.ts';
import type { HostFacts, PythonRuntime } from './detect-host.ts';
import type { PreparedHost } from './prepare-host.ts';
import type { SyscallFilterStatus } from './seccomp.ts';
import type { UidRange } from './uids.ts';

/** What the runtime enforces on this host, and how (for operators and `/api/attestation/security`). */
export interface LinuxNamespacesStatus extends SandboxStatus {
  runtime: 'linux-namespaces';
  /** `cgroup-v1`: memory, pids and CPU share per sandbox; `rlimits`: per-process rlimits only. */
  limits: 'cgroup-v1' | 'rlimits';
  syscallFilter: SyscallFilterStatus | { enforced: false; reason: string };
  details: LinuxNamespacesDetails;
}

// A type, not an interface: `details` is a record, which an interface does not satisfy.
export type LinuxNamespacesDetails = {
  /** Host users: one of `range` per live sandbox (as root), or the runtime's own for all. */
  users:
    { perSandbox: true; range: UidRange; inUse: number } | { perSandbox: false; uid: number; reason: string };
  /** Spares (spares.ts): at most `count` built ahead of need, `waiting` now. */
  spares: { count: number; waiting: number };
  /**
   * With cgroups: CPUs' worth of time per period, and the share of a period's quota a sandbox may
   * bank and spend at once (0 when off, or why the kernel cannot).
   */
  cpu?: { quota: number; burst: number | { unavailable: string } };
  /** Why limits are rlimits only. */
  limitsNote?: string;
  /** The interpreter `python` launches run on, or why there is none. */
  python: { executable: string; version: string } | { unavailable: string };
};

export interface StatusInput {
  config: LinuxNamespacesConfig;
  facts: HostFacts;
  python: PythonRuntime | { unavailable: string };
  /** Once started: what start-up settled (the self-test may have turned the filter off). */
  prepared: PreparedHost | undefined;
  usersInUse: number;
  running: number;
  spares: number;
}

const NAMESPACES = ['user', 'mount', 'pid', 'network', 'ipc', 'uts'];
const NETWORK =
  'own network namespace; allow-listed host:port only, through an HTTP proxy on a bound unix socket';

export function runtimeStatus({
  config,
  facts,
  python,
  prepared,
  usersInUse,
  running,
  spares,
}: StatusInput): LinuxNamespacesStatus {
  const root = process.getuid?.() === 0;
  const cgroups = config.cgroups === 'auto' && root ? CgroupV1.detect() : undefined;
  const filter = prepared
    ? (prepared.syscallFilter?.filter.status ?? {
        enforced: false as const,
        reason: prepared.syscallFilterOff ?? 'off',
      })
    : 'off' in facts.filter
      ? { enforced: false as const, reason: facts.filter.off }
      : facts.filter.filter.status;
  return {
    runtime: 'linux-namespaces',
    runs: {
      host: ['node', ...('interpreter' in python ? (['python'] as const) : []), 'binary'],
      image: false,
    },
    namespaces: NAMESPACES,
    limits: cgroups instanceof CgroupV1 ? 'cgroup-v1' : 'rlimits',
    network: NETWORK,
    syscallFilter: filter,
    running,
    details: {
      users: root
        ? { perSandbox: true, range: config.uidRange, inUse: usersInUse }
        : {
            perSandbox: false,
            uid: process.getuid?.() ?? -1,
            reason: "not root: every sandbox runs as the runtime's own user",
          },
      spares: { count: config.spares.count, waiting: spares },
      ...(cgroups instanceof CgroupV1
        ? {
            cpu: {
              quota: config.cpuQuota,
              burst: cgroups.bursts
                ? config.cpuBurst
                : { unavailable: 'the kernel has no cpu.cfs_burst_us (Linux 5.14 on)' },
            },
          }
        : {
            limitsNote:
              cgroups?.unavailable ?? 'cgroups off or not root: memory is limited per process (RLIMIT_DATA)',
          }),
      python:
        'interpreter' in python
          ? { executable: python.interpreter.executable, version: python.interpreter.version }
          : python,
    },
  };
}
