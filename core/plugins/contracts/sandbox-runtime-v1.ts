/**
 * `sandbox-runtime` v1: runs an MCP server process in isolation. A conforming runtime enforces a
 * read-only root, a noexec /tmp, no capabilities, no new privileges, a non-root user and a network
 * limited to the allow-list; secrets arrive only as environment variables.
 */
export interface SandboxRuntimeV1 {
  readonly specVersion: 'v1';
  /** Starts the process; its stdio carries MCP JSON-RPC. */
  spawn(spec: SandboxSpec): Promise<SandboxProcess>;
}

export interface SandboxSpec {
  /** Directory of the installed package, mounted read-only. */
  packagePath: string;
  command: string;
  args: readonly string[];
  /** The whole environment of the process: nothing of the host's leaks in. */
  env: Readonly<Record<string, string>>;
  /** Hosts (`host:port`) the process may reach; empty means no network. */
  networkAllowList: readonly string[];
  limits?: { memoryBytes?: number; cpuSeconds?: number; pids?: number };
}

export interface SandboxProcess {
  readonly stdin: NodeJS.WritableStream;
  readonly stdout: NodeJS.ReadableStream;
  readonly stderr: NodeJS.ReadableStream;
  /** Resolves with the exit code once the process has ended. */
  readonly exited: Promise<number | null>;
  kill(): Promise<void>;
}
