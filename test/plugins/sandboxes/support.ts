import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { SandboxLimits } from '@sigil/plugin-api';
import { SANDBOX_PROBE_FILE as probeScript } from '@sigil/plugin-api/kit';
import { configSchema, LinuxNamespacesRuntime } from '../../../plugins/sandboxes/linux-namespaces/index.ts';
import type { LinuxSandboxProcess } from '../../../plugins/sandboxes/linux-namespaces/sandbox-process.ts';
import type { FilterLoaderChoice } from '../../../plugins/sandboxes/linux-namespaces/detect-host.ts';
import { quietLogger } from '../../support/kernel.ts';

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
    const sandbox = await runtime.spawn({
      packagePath: dirname(probeScript),
      command: process.execPath,
      args: [probeScript, mode, ...args],
      env: {},
      networkAllowList: allow,
      ...(limits ? { limits } : {}),
      ...(readOnlyPaths ? { readOnlyPaths } : {}),
    });
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
