import type { LaunchDescriptor } from './launch.ts';
import type { SandboxLimits, SandboxProcess } from './sandbox-runtime-v1.ts';

/**
 * `sandbox-runtime` v2: runs an MCP server in isolation; its stdio carries MCP JSON-RPC.
 *
 * What changed from v1: the program is a {@link LaunchDescriptor} (a program under an install root on
 * the host, run by an interpreter the sandbox supplies, or a digest-pinned OCI image), and `status()`
 * says what the runtime enforces. A v1 plugin keeps working: the host adapts it (host programs only,
 * its status unknown).
 *
 * A conforming runtime guarantees, for every process it runs (and every process that one starts), all
 * that v1 guarantees:
 * - the root filesystem is read-only: nothing is writable but `/tmp`, which is a fresh, private,
 *   size-limited filesystem mounted noexec, nosuid and nodev; nothing of the host's shared state
 *   (`/dev/shm`, IPC, other processes' files) is visible;
 * - of the host's files it sees only the install root, what the program needs to run and
 *   `readOnlyPaths` (a SHOULD: no documentation, compiler, package manager or home of the host);
 * - it holds no capabilities and runs with no_new_privs, so no exec can grant any;
 * - it runs as a non-root user, and as a host user that no other running sandbox shares;
 * - no secret of it is reachable from another sandbox through any kernel channel: the kernel keyring
 *   is closed to it (add_key, request_key and keyctl fail), and a secret is never written to disk nor
 *   shown by the engine to anyone but the gateway that started it;
 * - a syscall filter refuses at least ptrace, mount and umount, pivot_root, the keyring calls, bpf,
 *   perf_event_open, userfaultfd, kexec, module loading, unshare and setns, clone of new namespaces,
 *   and any call through another ABI (32-bit entry), or `status().syscallFilter` says it is off and why;
 * - it sees only its own processes;
 * - it reaches no network but the `host:port` pairs of `networkAllowList`, through a proxy that
 *   refuses every other destination; with an empty list it reaches nothing, not even loopback;
 * - its environment is exactly the launch's `env`, then `env`, plus what v1 lists as added: nothing of
 *   the host's leaks in;
 * - `limits` hold, and a process that breaks one is ended with `SandboxExit.limit` saying which;
 * - it cannot exhaust the host's descriptors (`limits.openFiles`, `limits.egressConnections`);
 * - it does not outlive the runtime's host process, even when that process is killed with SIGKILL:
 *   what is left (a container, a cgroup) is reaped at the next start at the latest.
 */
export interface SandboxRuntimeV2 {
  /** The version of this contract the instance implements: its manifest's `specVersion`. */
  readonly specVersion: 'v2';
  /**
   * Starts the process. Resolves once the process exists; a failure to set the sandbox up shows as
   * an early `exited` with a `reason`, never as a weaker sandbox. Rejects with `invalid_request` when
   * `spec` is invalid, and with `unavailable` when it asks for what this runtime cannot run here (an
   * image on a host runtime, an interpreter it lacks, an engine that is down), naming the cause.
   */
  spawn(spec: SandboxSpecV2): Promise<SandboxProcess>;
  /** What this runtime enforces on this host now, and what it can run. Reads local state only. */
  status(): Promise<SandboxStatus>;
}

export interface SandboxSpecV2 {
  /** What to run. */
  launch: LaunchDescriptor;
  /**
   * The environment besides the launch's own (catalog settings, a wallet's secrets). Names must be
   * shell identifiers (`[A-Za-z_][A-Za-z0-9_]*`). Values are secrets as far as the runtime knows:
   * only this process and the engine that runs it may hold them.
   */
  env: Readonly<Record<string, string>>;
  /** Upstreams (`host:port`) the process may reach, as in v1; empty means no network at all. */
  networkAllowList: readonly string[];
  /** Each limit overrides the runtime's default for this process. */
  limits?: SandboxLimits;
  /**
   * Who the process is for, for the operator's tools (e.g. container labels): a server id and an
   * opaque caller id. Never secret, never used to decide anything.
   */
  labels?: Readonly<Record<string, string>>;
}

/** What a runtime enforces, for operators and `/api/attestation/security`. */
export interface SandboxStatus {
  /** The runtime's own name, e.g. `linux-namespaces` or `docker`. */
  runtime: string;
  /** What it can run now: `host` programs (with which interpreters) and/or `image`s. */
  runs: { host: readonly ('node' | 'python' | 'binary')[]; image: boolean };
  /** Namespaces each sandbox gets, e.g. `user`, `mount`, `pid`, `net`, `ipc`, `uts`, `cgroup`. */
  namespaces: readonly string[];
  /** How limits are enforced, e.g. `cgroup-v1`, `cgroup-v2`, `rlimits`, `engine`. */
  limits: string;
  /** How the network is confined, e.g. `none-or-egress-proxy`. */
  network: string;
  /** The syscall filter: on, with what it refuses; or off and why. */
  syscallFilter:
    | { enforced: true; denied: readonly string[]; otherAbis: 'killed' | 'denied' }
    | {
        enforced: false;
        reason: string;
      };
  /** Sandboxes running now. */
  running: number;
  /** Anything else the runtime wants operators to see (its engine, a gVisor runtime, …). */
  details?: Readonly<Record<string, unknown>>;
}
