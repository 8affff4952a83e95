import { rmSync } from 'node:fs';
import type { PluginLogger, SandboxRuntimeV1, SandboxSpec } from '@sigil/plugin-api';
import { SigilError } from '@sigil/plugin-api';
import { CgroupV1 } from './cgroups.ts';
import { DEFAULT_LIMITS, type LinuxNamespacesConfig, type SandboxLimits } from './config.ts';
import { EgressAddresses } from './egress-addresses.ts';
import { currentOwner, reapLeftovers, type ReapReport } from './leftovers.ts';
import { detectHost, type FilterLoaderChoice, type HostFacts } from './detect-host.ts';
import { prepareHost, type PreparedHost } from './prepare-host.ts';
import type { LinuxSandboxProcess } from './sandbox-process.ts';
import type { SyscallFilterStatus } from './seccomp.ts';
import { startSandbox, type SandboxContext } from './start-sandbox.ts';
import { UidAllocator, type UidRange } from './uids.ts';

/** What the runtime enforces on this host, and how (for operators and `/api/attestation/security`). */
export interface LinuxNamespacesStatus {
  /** Host users: one of `range` per live sandbox (as root), or the runtime's own for all. */
  users:
    { perSandbox: true; range: UidRange; inUse: number } | { perSandbox: false; uid: number; reason: string };
  namespaces: readonly string[];
  /** `cgroup-v1`: memory, pids and CPU share per sandbox; `rlimits`: per-process rlimits only. */
  limits: 'cgroup-v1' | 'rlimits';
  limitsNote?: string;
  network: string;
  syscallFilter: SyscallFilterStatus | { enforced: false; reason: string };
  running: number;
}

export interface RuntimeOptions {
  config: LinuxNamespacesConfig;
  logger: PluginLogger;
  /** Who owns this runtime's sandboxes; this process unless a test stands in for another one. */
  owner?: string;
  /** Whether core dumps go to a pipe helper; read from the kernel unless a test decides. */
  coreToPipe?: boolean;
  /** Which interpreter loads the syscall filter: perl when present, else python3, unless a test decides. */
  filterInterpreter?: FilterLoaderChoice;
}

/**
 * The `sandbox-runtime` built on kernel namespaces through util-linux alone (setpriv, unshare,
 * mount, umount, pivot_root, prlimit), plus iproute2's `ip` when a sandbox has a network allow-list.
 */
export class LinuxNamespacesRuntime implements SandboxRuntimeV1 {
  readonly specVersion = 'v1' as const;
  readonly owner: string;
  private readonly coreToPipe: boolean | undefined;
  private readonly filterInterpreter: FilterLoaderChoice | undefined;
  private readonly config: LinuxNamespacesConfig;
  private readonly logger: PluginLogger;
  private readonly limits: SandboxLimits;
  private facts: Promise<HostFacts> | undefined;
  private ready: Promise<PreparedHost> | undefined;
  /** Set once start() has finished. */
  private prepared: PreparedHost | undefined;
  private stopped = false;
  private readonly running = new Set<LinuxSandboxProcess>();
  private readonly users: UidAllocator;
  private readonly egressAddresses: EgressAddresses;

  constructor(options: RuntimeOptions) {
    this.config = options.config;
    this.logger = options.logger;
    this.owner = options.owner ?? currentOwner();
    this.coreToPipe = options.coreToPipe;
    this.filterInterpreter = options.filterInterpreter;
    this.limits = { ...DEFAULT_LIMITS, ...options.config.limits };
    this.users = new UidAllocator(options.config.uidRange);
    this.egressAddresses = new EgressAddresses(options.config.egress.privateRanges);
  }

  /** Finds the tools, prepares the state dir, reaps leftovers of earlier runs and runs a self-test. */
  async start(): Promise<void> {
    await this.prepare();
  }

  /** Kills every sandbox of this runtime and removes its state. */
  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.running].map((sandbox) => sandbox.kill()));
    const ready = await this.ready?.catch(() => undefined);
    if (ready) rmSync(ready.ownerDir, { recursive: true, force: true });
  }

  async spawn(spec: SandboxSpec): Promise<LinuxSandboxProcess> {
    return this.launch(await this.prepare(), spec);
  }

  status(): LinuxNamespacesStatus {
    const cgroups =
      this.config.cgroups === 'auto' && process.getuid?.() === 0 ? CgroupV1.detect() : undefined;
    const root = process.getuid?.() === 0;
    return {
      users: root
        ? { perSandbox: true, range: this.config.uidRange, inUse: this.users.inUse }
        : {
            perSandbox: false,
            uid: process.getuid?.() ?? -1,
            reason: "not root: every sandbox runs as the runtime's own user",
          },
      namespaces: ['user', 'mount', 'pid', 'network', 'ipc', 'uts'],
      limits: cgroups instanceof CgroupV1 ? 'cgroup-v1' : 'rlimits',
      ...(cgroups instanceof CgroupV1
        ? {}
        : {
            limitsNote:
              cgroups?.unavailable ?? 'cgroups off or not root: memory is limited per process (RLIMIT_DATA)',
          }),
      network:
        'own network namespace; allow-listed host:port only, through an HTTP proxy on a bound unix socket',
      syscallFilter: this.prepared?.syscallFilter?.filter.status ?? {
        enforced: false,
        reason: this.prepared?.syscallFilterOff ?? 'the runtime has not started',
      },
      running: this.running.size,
    };
  }

  /** Kills and removes what runtimes gone before left behind (leftovers.ts); run by start() too. */
  async reapLeftovers(): Promise<ReapReport> {
    const report = await reapLeftovers({
      owner: this.owner,
      stateDir: this.config.stateDir,
      cgroups: this.config.cgroups,
    });
    if (report.processes + report.cgroups + report.stateDirs > 0) {
      this.logger.warn({ reaped: report }, 'killed and removed sandboxes left behind by an earlier run');
    }
    return report;
  }

  private prepare(): Promise<PreparedHost> {
    if (this.stopped) return Promise.reject(new SigilError('unavailable', 'the sandbox runtime is stopped'));
    this.ready ??= this.boot();
    return this.ready;
  }

  private async boot(): Promise<PreparedHost> {
    this.facts ??= detectHost({ config: this.config, filterInterpreter: this.filterInterpreter });
    let host = await prepareHost({
      config: this.config,
      facts: await this.facts,
      owner: this.owner,
      coreToPipe: this.coreToPipe,
      reapLeftovers: () => this.reapLeftovers(),
    });
    let failure = await this.selfTest(host);
    if (failure && host.syscallFilter && this.config.syscallFilter === 'auto') {
      // A host where the filter's loader cannot run still gets sandboxes, and says why they lack it.
      const without = {
        ...host,
        syscallFilter: undefined,
        syscallFilterOff: `the syscall filter failed the start-up self-test: ${failure}`,
      };
      if ((await this.selfTest(without)) === undefined) {
        host = without;
        failure = undefined;
      }
    }
    if (failure) throw selfTestFailed(failure);
    if (!host.syscallFilter) {
      this.logger.warn({ reason: host.syscallFilterOff }, 'sandboxes run without a syscall filter');
    }
    this.logger.info(
      {
        users: host.sharedUid === undefined ? this.config.uidRange : 'shared (not root)',
        syscallFilter: host.syscallFilter?.filter.status.loader ?? 'off',
        limits: host.cgroups ? 'cgroup-v1' : 'rlimits',
        note: host.cgroupsNote,
      },
      'sandbox runtime ready',
    );
    this.prepared = host;
    return host;
  }

  /**
   * One trivial sandbox, so a host that cannot build one fails at start-up, not at the first tool
   * call; why it failed, or undefined.
   */
  private async selfTest(host: PreparedHost): Promise<string | undefined> {
    const probe = await this.launch(host, {
      packagePath: host.emptyDir,
      command: host.tools.sh,
      args: ['-c', 'exit 0'],
      env: {},
      networkAllowList: [],
    });
    probe.stdout.resume();
    let stderr = '';
    probe.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exit = await probe.exited;
    if (exit.code === 0) return undefined;
    return exit.reason ?? (stderr.trim() || `exit code ${exit.code}`);
  }

  private async launch(host: PreparedHost, spec: SandboxSpec): Promise<LinuxSandboxProcess> {
    const sandbox = await startSandbox(this.sandboxContext(), host, spec);
    this.running.add(sandbox);
    void sandbox.exited.then(() => this.running.delete(sandbox));
    return sandbox;
  }

  private sandboxContext(): SandboxContext {
    const { config, limits, owner, logger, users, egressAddresses } = this;
    return { config, limits, owner, logger, users, egressAddresses };
  }
}

const selfTestFailed = (detail: string) =>
  new SigilError('unavailable', `cannot build a sandbox on this host: ${detail}`, {
    details: { reason: 'self_test_failed' },
  });
