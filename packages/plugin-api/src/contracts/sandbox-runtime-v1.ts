/**
 * `sandbox-runtime` v1: runs an MCP server process in isolation; its stdio carries MCP JSON-RPC.
 *
 * A conforming runtime guarantees, for every process it spawns (and every process that one starts):
 * - the root filesystem is read-only: nothing is writable but `/tmp`, which is a fresh, private,
 *   size-limited filesystem mounted noexec, nosuid and nodev; nothing of the host's shared state
 *   (`/dev/shm`, IPC, other processes' files) is visible;
 * - of the host's files it should see only the package, what `command` needs to run and
 *   `readOnlyPaths` (a SHOULD: no documentation, compiler, package manager or home of the host);
 * - it holds no capabilities (effective, permitted, inheritable, bounding and ambient sets empty) and
 *   runs with no_new_privs, so no exec can grant any;
 * - it runs as a non-root user on the host, and as a host user that no other running sandbox shares;
 * - no secret of it is reachable from another sandbox through any kernel channel (the kernel keyring
 *   included): the kernel keyring is closed to it: add_key, request_key and keyctl fail;
 * - it sees only its own processes (its own PID namespace);
 * - it reaches no network but the `host:port` pairs of `networkAllowList`; with an empty list it
 *   reaches nothing, not even the host's loopback;
 * - its environment is exactly `env` plus what {@link SandboxSpec.env} lists as added: nothing of the
 *   host's leaks in, and no value of `env` is ever written to a file;
 * - `limits` hold, and a process that breaks one is ended with {@link SandboxExit.limit} saying which;
 * - it cannot exhaust the host's descriptors: each process holds at most `limits.openFiles`, and the
 *   sandbox at most `limits.egressConnections` connections through its allow-list (more are refused);
 * - it does not outlive the runtime's host process, even when that process is killed with SIGKILL.
 */
export interface SandboxRuntimeV1 {
  /** The version of this contract the instance implements: its manifest's `specVersion`. */
  readonly specVersion: 'v1';
  /**
   * Starts the process. Resolves once the process exists; a failure to set the sandbox up shows as
   * an early `exited` with a `reason`, never as a weaker sandbox. Rejects only when `spec` is invalid
   * or asks for something this runtime cannot enforce.
   */
  spawn(spec: SandboxSpec): Promise<SandboxProcess>;
}

export interface SandboxSpec {
  /**
   * Absolute directory of the installed package with its dependency tree (the install root), mounted
   * read-only at the same path, so `command` and `args` may name files inside it as they are.
   */
  packagePath: string;
  /** Executable: an absolute path, or a name looked up on the host's PATH; mounted read-only. */
  command: string;
  args: readonly string[];
  /** Working directory inside the sandbox; `packagePath` when absent. */
  cwd?: string;
  /**
   * The process's whole environment. The runtime adds only `PATH` and `HOME` (when absent here) and,
   * with a non-empty `networkAllowList`, the proxy variables of {@link SandboxSpec.networkAllowList}.
   * Names must be shell identifiers (`[A-Za-z_][A-Za-z0-9_]*`).
   */
  env: Readonly<Record<string, string>>;
  /**
   * Upstreams (`host:port`, exact host name or address, case-insensitive) the process may reach. Empty
   * means no network. Otherwise the process reaches them through an HTTP proxy (CONNECT, or
   * absolute-form plain HTTP) named in `HTTP_PROXY`/`HTTPS_PROXY` (and their lowercase forms), which
   * refuses every other destination.
   */
  networkAllowList: readonly string[];
  /**
   * Further absolute host paths (files or directories) to mount read-only at the same path. The
   * runtime mounts what `command` needs to run (its interpreter, shared libraries); an executable or
   * shared library given here brings its shared libraries too. Nothing else of the host need be visible.
   */
  readOnlyPaths?: readonly string[];
  /** Each limit overrides the runtime's default for this process. */
  limits?: SandboxLimits;
}

export interface SandboxLimits {
  /** Memory of the whole sandbox (or, where the runtime can only limit processes, of each process). */
  memoryBytes?: number;
  /** CPU time of each process, in seconds. */
  cpuSeconds?: number;
  /** Processes and threads the sandbox may run at once. */
  pids?: number;
  /** Bytes stdout and stderr may carry together over the process's life; past it the process is killed. */
  outputBytes?: number;
  /** Size of the writable `/tmp`, and so the largest file the process can write. */
  tmpBytes?: number;
  /** Descriptors each process may hold open at once (RLIMIT_NOFILE, soft and hard). */
  openFiles?: number;
  /**
   * Connections the sandbox may hold open at once through its network allow-list; the runtime
   * refuses more, so that a sandbox cannot exhaust the host's descriptors.
   */
  egressConnections?: number;
}

/** Which limit ended a process. */
export type SandboxLimitName = 'memory' | 'cpu' | 'pids' | 'output' | 'file-size';

export interface SandboxExit {
  /** The process's exit code; a process ended by signal N reports 128 + N. */
  code: number | null;
  /** The signal that ended the process, when the runtime knows it. */
  signal: NodeJS.Signals | null;
  /** Set when the process broke a limit (and was ended for it). */
  limit?: SandboxLimitName;
  /** Why the process ended, in words an operator can act on, when it was not a plain exit. */
  reason?: string;
}

export interface SandboxProcess {
  /** The caller writes MCP messages here; ending it asks the server to shut down. */
  readonly stdin: NodeJS.WritableStream;
  /** The caller must keep reading stdout and stderr: a full pipe stalls the process. */
  readonly stdout: NodeJS.ReadableStream;
  readonly stderr: NodeJS.ReadableStream;
  /** Resolves once the process and everything it started have ended; never rejects. */
  readonly exited: Promise<SandboxExit>;
  /** Ends stdin, gives the process a short grace period, then kills the whole sandbox; resolves once it has ended. */
  kill(): Promise<void>;
}
