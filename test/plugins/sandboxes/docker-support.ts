import { spawn, type ChildProcess } from 'node:child_process';
import { dirname } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type Docker from 'dockerode';
import type { LaunchDescriptor, SandboxExit, SandboxLimits, SandboxSpecV2 } from '@sigil/plugin-api';
import { SANDBOX_PROBE_FILE } from '@sigil/plugin-api/kit';
import { ProcessStdioTransport } from '../../../core/mcp/process-transport.ts';
import { configSchema, DockerRuntime } from '../../../plugins/sandboxes/docker/index.ts';
import type { DockerSandboxProcess } from '../../../plugins/sandboxes/docker/docker-process.ts';
import type { Owner } from '../../../plugins/sandboxes/docker/owner.ts';
import { testEngine, type TestEngine } from '../../support/docker.ts';
import { quietLogger } from '../../support/kernel.ts';
import { fixturePath, repoPath } from '../../support/paths.ts';

/**
 * Docker runtimes of one test file on the test engine (test/support/docker.ts), the probe run in
 * them as a host program (the kit's probe, its directory bound read-only into the node test image),
 * and everything stopped after the file.
 */
export class DockerProbes {
  engine!: TestEngine;
  private readonly runtimes: DockerRuntime[] = [];

  async start(): Promise<void> {
    this.engine = await testEngine();
  }

  /**
   * A started runtime on the test engine's socket with the plugin's `options` on top; its containers'
   * owner is this process unless `owner` stands in for another gateway.
   */
  async runtime(options: Record<string, unknown> = {}, owner?: Owner): Promise<DockerRuntime> {
    const runtime = new DockerRuntime({
      config: configSchema.parse({
        engine: { socketPath: this.engine.socketPath },
        images: this.engine.images,
        // The probes that sleep ignore stdin: kill() comes down to SIGKILL anyway.
        killGraceMs: 200,
        stateDir: '/tmp/sigil-docker-test',
        ...options,
      }),
      logger: quietLogger(),
      ...(owner ? { owner } : {}),
    });
    this.runtimes.push(runtime);
    await runtime.start();
    return runtime;
  }

  async stop(): Promise<void> {
    await Promise.all(this.runtimes.splice(0).map((runtime) => runtime.stop()));
  }
}

/** The official SDK's client, connected to the MCP server in `sandbox`; closing it kills the sandbox. */
export async function mcpClient(
  sandbox: ConstructorParameters<typeof ProcessStdioTransport>[0],
): Promise<Client> {
  const client = new Client({ name: 'sandbox-docker-test', version: '1.0.0' });
  await client.connect(new ProcessStdioTransport(sandbox));
  return client;
}

/** The text `tool` answers through `client`. */
export async function callTool(client: Client, tool: string, args: Record<string, unknown>): Promise<string> {
  const result = await client.callTool({ name: tool, arguments: args });
  return (result.content as { type: string; text: string }[]).map((c) => c.text).join('');
}

/** Lists tools and calls `tool` through the sandbox, then closes the client (which kills the sandbox). */
export async function callThrough(
  sandbox: ConstructorParameters<typeof ProcessStdioTransport>[0],
  tool: string,
  args: Record<string, unknown>,
): Promise<{ tools: string[]; text: string }> {
  const client = await mcpClient(sandbox);
  try {
    const { tools } = await client.listTools();
    return { tools: tools.map((t) => t.name), text: await callTool(client, tool, args) };
  } finally {
    await client.close();
  }
}

/**
 * A stand-in gateway in a child process (test/fixtures/sandbox/docker-gateway-child.ts) with the
 * plugin's `options`, running a sleeping probe (a host program, or `launch`): the child, the probe's
 * container id and the runtime's watchdog pid.
 */
export async function childGateway(
  options: Record<string, unknown>,
  launch?: LaunchDescriptor,
): Promise<{ child: ChildProcess; container: string; watchdog: number }> {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      fixturePath('sandbox', 'docker-gateway-child.ts'),
      JSON.stringify(options),
      ...(launch ? [JSON.stringify(launch)] : []),
    ],
    { cwd: repoPath(), stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const line = await new Promise<string>((resolve, reject) => {
    child.stdout.once('data', (chunk: Buffer) => resolve(chunk.toString()));
    child.once('exit', () => reject(new Error('the stand-in gateway exited early')));
  });
  return { child, ...(JSON.parse(line) as { container: string; watchdog: number }) };
}

export interface ProbeOptions {
  args?: string[];
  env?: Record<string, string>;
  allow?: string[];
  limits?: SandboxLimits;
}

export interface ProbeRun<T> {
  exit: SandboxExit;
  /** The probe's last stdout line, parsed; undefined when it printed none. */
  report: T;
  stdoutBytes: number;
  stderr: string;
}

/** The probe in `mode` as a host program of the node image. */
export const probeSpec = (mode: string, options: ProbeOptions = {}): SandboxSpecV2 => ({
  launch: {
    kind: 'host',
    runtime: 'node',
    root: dirname(SANDBOX_PROBE_FILE),
    args: [SANDBOX_PROBE_FILE, mode, ...(options.args ?? [])],
  },
  env: options.env ?? {},
  networkAllowList: options.allow ?? [],
  ...(options.limits ? { limits: options.limits } : {}),
});

/** Runs the probe in `mode` to its end and returns what it reported. */
export async function runProbe<T>(
  runtime: DockerRuntime,
  mode: string,
  options: ProbeOptions = {},
): Promise<ProbeRun<T>> {
  const sandbox = await runtime.spawn(probeSpec(mode, options));
  let stdout = '';
  let stdoutBytes = 0;
  let stderr = '';
  sandbox.stdout.on('data', (chunk: Buffer) => {
    stdoutBytes += chunk.length;
    if (stdout.length < 4 * 1024 * 1024) stdout += chunk.toString();
  });
  sandbox.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-8192)));
  const exit = await sandbox.exited;
  let report: T;
  try {
    report = JSON.parse(stdout.trim().split('\n').pop() ?? '') as T;
  } catch {
    report = undefined as T;
  }
  return { exit, report, stdoutBytes, stderr };
}

/** Starts the probe in `mode` and resolves with the sandbox and its first report line, parsed. */
export async function startProbe<T>(
  runtime: DockerRuntime,
  mode: string,
  options: ProbeOptions = {},
): Promise<{ sandbox: DockerSandboxProcess; report: T }> {
  const sandbox = await runtime.spawn(probeSpec(mode, options));
  sandbox.stderr.resume();
  let out = '';
  const line = await new Promise<string>((resolve, reject) => {
    sandbox.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('\n')) resolve(out.trim());
    });
    void sandbox.exited.then((exit) => reject(new Error(`probe ${mode} ended: ${JSON.stringify(exit)}`)));
  });
  return { sandbox, report: JSON.parse(line) as T };
}

/**
 * Resolves once the engine reports `action` (e.g. `destroy`) for container `id`, or with false after
 * `timeoutMs`; listening starts before `trigger` runs, so no event is missed.
 */
export async function containerEvent(
  docker: Docker,
  id: string,
  action: string,
  trigger: () => unknown,
  timeoutMs = 30_000,
): Promise<boolean> {
  const events = (await docker.getEvents({
    filters: { container: [id], event: [action] },
  })) as NodeJS.ReadableStream & {
    destroy(): void;
  };
  try {
    const seen = new Promise<boolean>((resolve) => {
      events.once('data', () => resolve(true));
      setTimeout(() => resolve(false), timeoutMs).unref();
    });
    await trigger();
    return await seen;
  } finally {
    events.destroy();
  }
}

/** Whether the engine still has container `id`. */
export async function containerExists(docker: Docker, id: string): Promise<boolean> {
  try {
    await docker.getContainer(id).inspect();
    return true;
  } catch (error) {
    if ((error as { statusCode?: number }).statusCode === 404) return false;
    throw error;
  }
}
