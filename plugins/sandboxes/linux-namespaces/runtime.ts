import { rmSync } from 'node:fs';
import type { PluginLogger, SandboxRuntimeV2, SandboxSpecV2 } from '@sigil/plugin-api';
import { SigilError } from '@sigil/plugin-api';
import { DEFAULT_SANDBOX_LIMITS, type EnforcedSandboxLimits } from '@sigil/plugin-api/sandbox';
import type { LinuxNamespacesConfig } from './config.ts';
import { detectHost, type FilterLoaderChoice, type HostFacts } from './detect-host.ts';
import { EgressAddresses } from '@sigil/plugin-api/egress';
import { currentOwner, reapLeftovers, type ReapReport } from './leftovers.ts';
import { prepareHost, type PreparedHost } from './prepare-host.ts';
import type { LinuxSandboxProcess } from './sandbox-process.ts';
import { checkSpec, type HostRun } from './spec.ts';
import { SpareSandboxes } from './spares.ts';
import { prepareSandbox, startSandbox, type SandboxContext } from './start-sandbox.ts';
import { runtimeStatus, type LinuxNamespacesStatus } from './status.ts';
import { UidAllocator } from './uids.ts';

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
export class LinuxNamespacesRuntime implements SandboxRuntimeV2 {
  readonly specVersion = 'v2' as const;
  readonly owner: string;
  private readonly coreToPipe: boolean | undefined;
  private readonly filterInterpreter: FilterLoaderChoice | undefined;
  private readonly config: LinuxNamespacesConfig;
  private readonly logger: PluginLogger;
  private readonly limits: EnforcedSandboxLimits;
  private facts: Promise<HostFacts> | undefined;
  private ready: Promise<PreparedHost> | undefined;
  /** Set once start() has finished. */
  private prepared: PreparedHost | undefined;
  private stopped = false;
  private readonly running = new Set<LinuxSandboxProcess>();
  private readonly users: UidAllocator;
  private readonly egressAddresses: EgressAddresses;
  private readonly spares: SpareSandboxes;

  constructor(options: RuntimeOptions) {
    this.config = options.config;
    this.logger = options.logger;
    this.owner = options.owner ?? currentOwner();
    this.coreToPipe = options.coreToPipe;
    this.filterInterpreter = options.filterInterpreter;
    this.limits = { ...DEFAULT_SANDBOX_LIMITS, ...options.config.limits };
    this.users = new UidAllocator(options.config.uidRange);
    this.egressAddresses = new EgressAddresses(options.config.egress.privateRanges);
    this.spares = new SpareSandboxes({
      count: options.config.spares.count,
      keepMs: options.config.spares.keepSeconds * 1000,
      prepare: async (plan) => prepareSandbox(this.sandboxContext(), await this.prepare(), plan),
      // A spare holds a uid of the range: built only while, with it, at most half the range is held.
      hasRoom: () => (this.users.inUse + 1) * 2 <= this.users.range.count,
      logger: this.logger,
    });
  }

  /** Finds the tools, prepares the state dir, reaps leftovers of earlier runs and runs a self-test. */
  async start(): Promise<void> {
    await this.prepare();
  }

  /** Kills every sandbox of this runtime, spares too, and removes its state. */
  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all([this.spares.close(), ...[...this.running].map((sandbox) => sandbox.kill())]);
    const ready = await this.ready?.catch(() => undefined);
    if (ready) rmSync(ready.ownerDir, { recursive: true, force: true });
  }

  /**
   * Runs a host launch: `node` on this process's own node, `python` on the host's python3 (see
   * python.ts), `binary` as it is. An image launch is refused (`unavailable`): the Docker sandbox runs
   * those.
   */
  async spawn(spec: SandboxSpecV2): Promise<LinuxSandboxProcess> {
    const host = await this.prepare();
    const { env, ...plan } = await checkSpec(spec, await this.detect());
    const spare = await this.spares.take(plan);
    const sandbox = spare ? this.track(spare.begin(env)) : await this.launchFresh(host, { ...plan, env });
    // Once it ends, the next start of the same server finds a sandbox built (spares.ts).
    void sandbox.exited.then(() => {
      if (!this.stopped) this.spares.replenish(plan);
    });
    return sandbox;
  }

  /** Spares built and waiting (config `spares`); resolves once none is being built, for tests and benchmarks. */
  async sparesReady(): Promise<number> {
    await this.spares.settled();
    return this.spares.size;
  }

  async status(): Promise<LinuxNamespacesStatus> {
    const facts = await this.detect();
    return runtimeStatus({
      config: this.config,
      facts,
      python: await facts.python(),
      prepared: this.prepared,
      usersInUse: this.users.inUse,
      running: this.running.size,
      spares: this.spares.size,
    });
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
    const facts = await this.detect();
    // A python the operator named must work: checked now, not at the first Python server.
    if (this.config.python !== undefined) await facts.python();
    let host = await prepareHost({
      config: this.config,
      facts,
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
      root: host.emptyDir,
      command: host.tools.sh,
      args: ['-c', 'exit 0'],
      cwd: host.emptyDir,
      env: {},
      networkAllowList: [],
      readOnlyPaths: [],
      runtimeNeeds: [],
      hidden: [],
    });
    probe.stdout.resume();
    let stderr = '';
    probe.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exit = await probe.exited;
    if (exit.code === 0) return undefined;
    return exit.reason ?? (stderr.trim() || `exit code ${exit.code}`);
  }

  private detect(): Promise<HostFacts> {
    this.facts ??= detectHost({ config: this.config, filterInterpreter: this.filterInterpreter });
    return this.facts;
  }

  private async launch(host: PreparedHost, spec: HostRun): Promise<LinuxSandboxProcess> {
    return this.track(await startSandbox(this.sandboxContext(), host, spec));
  }

  /** A sandbox built now; spares that hold the uids it needs give them up first. */
  private async launchFresh(host: PreparedHost, spec: HostRun): Promise<LinuxSandboxProcess> {
    try {
      return await this.launch(host, spec);
    } catch (err) {
      if (!(await this.spares.clear())) throw err;
      return this.launch(host, spec);
    }
  }

  private track(sandbox: LinuxSandboxProcess): LinuxSandboxProcess {
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
