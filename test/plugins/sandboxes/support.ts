import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { HostLaunch, SandboxLimits, SandboxSpecV2 } from '@sigil/plugin-api';
import { SANDBOX_PROBE_FILE as probeScript } from '@sigil/plugin-api/kit';
import { configSchema, LinuxNamespacesRuntime } from '../../../plugins/sandboxes/linux-namespaces/index.ts';
import type { LinuxSandboxProcess } from '../../../plugins/sandboxes/linux-namespaces/sandbox-process.ts';
import type { FilterLoaderChoice } from '../../../plugins/sandboxes/linux-namespaces/detect-host.ts';
import { quietLogger } from '../../support/kernel.ts';

const here = dirname(fileURLToPath(import.meta.url));
/** A package holding only `sh`, a link to the host's /bin/sh: a binary launch of a shell. */
export const SHELL_PACKAGE = join(here, '..', '..', 'fixtures', 'sandbox', 'shell');
export const SHELL = join(SHELL_PACKAGE, 'sh');

export interface SpecOptions {
  env?: Record<string, string>;
  allow?: string[];
  limits?: SandboxLimits;
  readOnlyPaths?: string[];
  cwd?: string;
}

/** A sandbox spec (v2) of a host launch, with no environment and no network unless `options` say. */
export function hostSpec(
  launch: Pick<HostLaunch, 'runtime' | 'root' | 'args'> & { command?: string },
  { env = {}, allow = [], limits, readOnlyPaths, cwd }: SpecOptions = {},
): SandboxSpecV2 {
  return {
    launch: {
      kind: 'host',
      ...launch,
      ...(readOnlyPaths ? { readOnlyPaths } : {}),
      ...(cwd ? { cwd } : {}),
    },
    env,
    networkAllowList: allow,
    ...(limits ? { limits } : {}),
  };
}

/** A node program: `args` are node's, under `root`. */
export const nodeSpec = (root: string, args: string[], options?: SpecOptions) =>
  hostSpec({ runtime: 'node', root, args }, options);

/** `sh -c script` (and its positional parameters), run as a binary of {@link SHELL_PACKAGE}. */
export const shellSpec = (args: string[], options?: SpecOptions) =>
  hostSpec({ runtime: 'binary', root: SHELL_PACKAGE, command: SHELL, args }, options);

/**
 * The linux-namespaces runtimes of one test file and the probes they run: a state directory of
 * their own (0755, so the sandboxes' users can reach what is mounted from it), a short kill grace,
 * and everything stopped after each test.
 */
export class ProbeRuntimes {
  readonly stateDir: string;
  private readonly runtimes: LinuxNamespacesRuntime[] = [];
  private readonly sandboxes: LinuxSandboxProcess[] = [];

  constructor(name: string) {
    this.stateDir = mkdtempSync(join(tmpdir(), `sigil-sandbox-${name}-`));
    chmodSync(this.stateDir, 0o755);
  }

  /** A started runtime with the plugin's `options` (and a filter loader other than its pick). */
  async runtime(
    options: Record<string, unknown> = {},
    filterInterpreter?: FilterLoaderChoice,
  ): Promise<LinuxNamespacesRuntime> {
    const runtime = new LinuxNamespacesRuntime({
      config: configSchema.parse({ stateDir: this.stateDir, killGraceMs: 100, ...options }),
      logger: quietLogger(),
      ...(filterInterpreter ? { filterInterpreter } : {}),
    });
    this.runtimes.push(runtime);
    await runtime.start();
    return runtime;
  }

  /** Starts the probe in `mode`; resolves with the sandbox and its first report line, parsed. */
  async probe<T>(
    runtime: LinuxNamespacesRuntime,
    mode: string,
    args: string[] = [],
    {
      allow = [],
      limits,
      readOnlyPaths,
    }: { allow?: string[]; limits?: SandboxLimits; readOnlyPaths?: string[] } = {},
  ): Promise<{ sandbox: LinuxSandboxProcess; report: T }> {
    const sandbox = await runtime.spawn(
      nodeSpec(dirname(probeScript), [probeScript, mode, ...args], {
        allow,
        ...(limits ? { limits } : {}),
        ...(readOnlyPaths ? { readOnlyPaths } : {}),
      }),
    );
    this.sandboxes.push(sandbox);
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

  /** Kills every probe and stops every runtime (after each test). */
  async stop(): Promise<void> {
    await Promise.all(this.sandboxes.splice(0).map((sandbox) => sandbox.kill()));
    await Promise.all(this.runtimes.splice(0).map((runtime) => runtime.stop()));
  }

  /** Removes the state directory (after the file). */
  remove(): void {
    rmSync(this.stateDir, { recursive: true, force: true });
  }
}
