import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { dirname, isAbsolute, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import { type PluginLogger, type SandboxRuntimeV1, type SandboxSpec, SigilError } from '@sigil/plugin-api';
import { CgroupV1, type SandboxCgroup } from './cgroups.ts';
import { EgressAddresses, parseRange } from './egress-addresses.ts';
import { EgressProxy, parseHostPort } from './egress-proxy.ts';
import {
  assertOwnedPrivately,
  assertTraversable,
  coreDumpsGoToPipe,
  firstUnsearchable,
  DEFAULT_PATH,
  findTools,
  resolveExecutable,
} from './host.ts';
import { environmentScript, launchCommand, type LaunchInput, type Tools } from './launch.ts';
import { currentOwner, marker, markedProcesses, ownerAlive } from './leftovers.ts';
import { ensureSkeleton, fstab, lendingFstab, planRoot, type LentPaths, type RootPlan } from './root.ts';
import { Dependencies } from './dependencies.ts';
import { LinuxSandboxProcess } from './sandbox-process.ts';
import {
  syscallFilter,
  type FilterInterpreter,
  type SyscallFilter,
  type SyscallFilterStatus,
} from './seccomp.ts';
import {
  assertRangeUnused,
  DEFAULT_UID_RANGE,
  UidAllocator,
  uidRangeSchema,
  type UidLease,
  type UidRange,
} from './uids.ts';

const MiB = 1024 * 1024;

export const limitsSchema = z
  .object({
    memoryBytes: z
      .number()
      .int()
      .min(16 * MiB),
    cpuSeconds: z.number().int().positive(),
    pids: z.number().int().min(8),
    outputBytes: z.number().int().positive(),
    tmpBytes: z.number().int().min(MiB),
    openFiles: z.number().int().min(16),
    egressConnections: z.number().int().min(1),
  })
  .strict();

const absolutePath = z.string().refine(isAbsolute, 'must be an absolute path');

/**
 * Host files every sandbox sees besides the programs it runs and their libraries (which the runtime
 * finds itself); missing entries are skipped. Not /usr: a server sees no compiler, shell tool or
 * document of the host that it was not given.
 */
export const DEFAULT_SYSTEM_PATHS = ['/etc/ld.so.cache', '/etc/localtime'];
const SHELL = '/bin/sh';
/** CA certificates (Debian's /etc/ssl/certs links into /usr/share/ca-certificates), for an allow-list only. */
const NETWORK_PATHS = ['/etc/ssl', '/usr/share/ca-certificates', '/etc/pki'];

export const configSchema = z
  .object({
    /** Per-run state (sandbox roots, fstabs, egress sockets); must be traversable by the sandbox user. */
    stateDir: absolutePath.default('/tmp/sigil-sandboxes'),
    /**
     * Host uids (and gids) for sandboxes when the runtime is root: each live sandbox holds one of its
     * own; it must be no one else's on this host. Not root: every sandbox runs as the runtime's user.
     */
    uidRange: uidRangeSchema.default(DEFAULT_UID_RANGE),
    /** `seccomp`: no kernel keyring, no foreign ABIs (needs perl or python3 on the host); `off`: none. */
    syscallFilter: z.enum(['seccomp', 'off']).default('seccomp'),
    limits: limitsSchema.partial().prefault({}),
    /** `auto`: per-sandbox cgroup v1 limits when available (root, v1 hierarchy); `off`: rlimits only. */
    cgroups: z.enum(['auto', 'off']).default('auto'),
    /** CPUs' worth of time a sandbox may use at once (cgroup only). */
    cpuQuota: z.number().positive().default(1),
    systemPaths: z.array(absolutePath).default(DEFAULT_SYSTEM_PATHS),
    /** Further host paths every sandbox sees read-only. */
    readOnlyPaths: z.array(absolutePath).default([]),
    /** How long `kill()` waits after closing stdin before it kills the sandbox. */
    killGraceMs: z.number().int().nonnegative().default(1000),
    /** Port of the egress forwarder on the sandbox's own loopback (HTTP_PROXY). */
    proxyPort: z.number().int().min(1).max(65535).default(3128),
    /** Timers of the egress proxy (the connection cap is `limits.egressConnections`). */
    egress: z
      .object({
        /** From a connection's accept until its tunnel is up: request head read, upstream connected. */
        headerTimeoutMs: z.number().int().positive().default(10_000),
        /** A tunnel with no traffic either way for this long is closed. */
        idleTimeoutMs: z.number().int().positive().default(300_000),
        /**
         * Private, loopback, link-local and other special ranges (CIDR) an allowed host name may
         * resolve to; by default none (an allow-list entry that is itself an address is always kept).
         */
        privateRanges: z
          .array(
            z.string().refine((value) => parseRange(value) !== undefined, 'must be an address or CIDR range'),
          )
          .default([]),
      })
      .strict()
      .prefault({}),
  })
  .strict();

export type LinuxNamespacesConfig = z.infer<typeof configSchema>;

export const DEFAULT_LIMITS: z.infer<typeof limitsSchema> = {
  memoryBytes: 512 * MiB,
  cpuSeconds: 600,
  pids: 256,
  outputBytes: 256 * MiB,
  tmpBytes: 64 * MiB,
  openFiles: 1024,
  egressConnections: 64,
};

/** Shell variable names only; PPID is read-only in sh, and `__sigil_` names are the init script's own. */
const ENV_NAME = /^(?!PPID$|__sigil_)[A-Za-z_][A-Za-z0-9_]*$/;
const noNul = (value: string) => !value.includes('\0');

const specSchema = z.object({
  packagePath: absolutePath,
  command: z.string().min(1).refine(noNul),
  args: z.array(z.string().refine(noNul, 'arguments cannot hold NUL')),
  cwd: absolutePath.optional(),
  env: z
    .record(z.string(), z.string().refine(noNul, 'environment values cannot hold NUL'))
    .superRefine((env, ctx) => {
      for (const name of Object.keys(env)) {
        if (!ENV_NAME.test(name)) {
          ctx.addIssue({
            code: 'custom',
            path: [name],
            message: 'environment names must be shell identifiers, other than PPID and __sigil_*',
          });
        }
      }
    }),
  networkAllowList: z.array(
    z.string().refine((entry) => parseHostPort(entry) !== undefined, 'must be host:port'),
  ),
  readOnlyPaths: z.array(absolutePath).optional(),
  limits: limitsSchema.partial().optional(),
});

/** Namespace kinds a sandbox may not create (their per-user-namespace maximum is set to 0). */
const NAMESPACE_KINDS = ['user', 'mnt', 'net', 'pid', 'ipc', 'uts', 'cgroup', 'time'];
/** sun_path holds 108 bytes with its terminating NUL. */
const MAX_SOCKET_PATH = 107;
const FORWARDER_SOURCE = fileURLToPath(new URL('./egress-forwarder.cjs', import.meta.url));

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

export interface ReapReport {
  processes: number;
  cgroups: number;
  stateDirs: number;
}

interface Ready {
  tools: Tools;
  /** Not root: the runtime's own uid, which every sandbox runs as. Root: a uid per sandbox. */
  sharedUid?: number;
  /** Installs the syscall filter, then execs the chain. */
  filterLoader?: string[];
  /**
   * What the chain runs after it has switched into the sandbox's root (umount, prlimit, setpriv, sh)
   * and their libraries.
   */
  chainFiles: readonly string[];
  dependencies: Dependencies;
  /** An empty directory, the self-test's package. */
  selfTestPackage: string;
  ownerDir: string;
  forwarder: string;
  namespaceLimits: string[];
  coreToPipe: boolean;
  cgroups?: CgroupV1;
  cgroupsNote?: string;
}

export interface RuntimeOptions {
  config: LinuxNamespacesConfig;
  logger: PluginLogger;
  /** Who owns this runtime's sandboxes; this process unless a test stands in for another one. */
  owner?: string;
  /** Whether core dumps go to a pipe helper; read from the kernel unless a test decides. */
  coreToPipe?: boolean;
  /** Which interpreter loads the syscall filter: perl when present, else python3, unless a test decides. */
  filterInterpreter?: FilterInterpreter;
}

/**
 * The `sandbox-runtime` built on kernel namespaces through util-linux alone (setpriv, unshare,
 * mount, umount, pivot_root, prlimit), plus iproute2's `ip` when a sandbox has a network allow-list.
 */
export class LinuxNamespacesRuntime implements SandboxRuntimeV1 {
  readonly specVersion = 'v1' as const;
  readonly owner: string;
  private readonly coreToPipe: boolean | undefined;
  private readonly filterInterpreter: FilterInterpreter | undefined;
  private readonly config: LinuxNamespacesConfig;
  private readonly logger: PluginLogger;
  private readonly limits: z.infer<typeof limitsSchema>;
  private ready: Promise<Ready> | undefined;
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
      syscallFilter: this.filterStatus(),
      running: this.running.size,
    };
  }

  /**
   * Kills what earlier runs of any runtime on this host left behind: processes, cgroups and state
   * directories whose owner process is gone. Normally there is nothing (a sandbox dies with its
   * runtime through PR_SET_PDEATHSIG), but a runtime killed in the instant between starting a
   * sandbox and the sandbox arming that signal, or a host crash, leaves some.
   */
  async reapLeftovers(): Promise<ReapReport> {
    const leftover = (owner: string) => owner !== this.owner && !ownerAlive(owner);
    const report: ReapReport = { processes: 0, cgroups: 0, stateDirs: 0 };
    for (const found of markedProcesses()) {
      if (!leftover(found.owner)) continue;
      try {
        process.kill(found.pid, 'SIGKILL');
        report.processes++;
      } catch {
        // gone meanwhile
      }
    }
    const cgroups = this.config.cgroups === 'auto' ? CgroupV1.detect() : undefined;
    if (cgroups instanceof CgroupV1) {
      for (const name of cgroups.names()) {
        if (!leftover(name.split('-')[0] ?? '')) continue;
        await cgroups.open(name).remove();
        report.cgroups++;
      }
    }
    let entries: string[] = [];
    try {
      entries = readdirSync(this.config.stateDir);
    } catch {
      // no state dir yet
    }
    for (const entry of entries) {
      const owner = /^(\d+\.\d+)-[0-9a-f]+$/.exec(entry)?.[1];
      if (owner === undefined || !leftover(owner)) continue;
      rmSync(join(this.config.stateDir, entry), { recursive: true, force: true });
      report.stateDirs++;
    }
    if (report.processes + report.cgroups + report.stateDirs > 0) {
      this.logger.warn({ reaped: report }, 'killed and removed sandboxes left behind by an earlier run');
    }
    return report;
  }

  private prepare(): Promise<Ready> {
    if (this.stopped) return Promise.reject(new SigilError('unavailable', 'the sandbox runtime is stopped'));
    this.ready ??= this.boot();
    return this.ready;
  }

  private async boot(): Promise<Ready> {
    const tools = findTools();
    if (!tools.ldd) {
      throw new SigilError('unavailable', 'the sandbox needs ldd to find the libraries of what it runs', {
        hint: 'install libc-bin (or your C library’s ldd)',
      });
    }
    const dependencies = new Dependencies(tools.ldd);
    const root = process.getuid?.() === 0;
    if (root) assertRangeUnused(this.config.uidRange);
    const filter = this.config.syscallFilter === 'seccomp' ? this.filter(tools) : undefined;
    mkdirSync(this.config.stateDir, { recursive: true, mode: 0o755 });
    assertTraversable(this.config.stateDir, this.someSandboxUid(), 'the sandbox state dir');
    assertOwnedPrivately(this.config.stateDir);
    await this.reapLeftovers();
    // One directory per runtime instance, so two in one process (tests, a second plugin id) never
    // remove each other's state; the owner part is what the reaper reads.
    const ownerDir = join(this.config.stateDir, `${this.owner}-${randomBytes(4).toString('hex')}`);
    for (const sub of ['roots', 'spawn', 'egress'])
      mkdirSync(join(ownerDir, sub), { recursive: true, mode: 0o755 });
    // A copy in the state dir, which the sandbox user can reach wherever the code itself is installed.
    const forwarder = join(ownerDir, 'egress-forwarder.cjs');
    copyFileSync(FORWARDER_SOURCE, forwarder);
    const detected =
      this.config.cgroups === 'auto' ? CgroupV1.detect() : { unavailable: 'cgroups: off in config' };
    const coreToPipe = this.coreToPipe ?? coreDumpsGoToPipe();
    const selfTestPackage = join(ownerDir, 'self-test');
    mkdirSync(selfTestPackage, { mode: 0o755 });
    const ready: Ready = {
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
      selfTestPackage,
      ...(root ? {} : { sharedUid: this.someSandboxUid() }),
      ...(filter ? { filterLoader: filter.loader } : {}),
      ownerDir,
      forwarder,
      coreToPipe,
      namespaceLimits: NAMESPACE_KINDS.map((kind) => `/proc/sys/user/max_${kind}_namespaces`).filter((file) =>
        existsSync(file),
      ),
      ...(detected instanceof CgroupV1 ? { cgroups: detected } : { cgroupsNote: detected.unavailable }),
    };
    await this.selfTest(ready);
    this.logger.info(
      {
        users: root ? this.config.uidRange : 'shared (not root)',
        syscallFilter: filter?.status.loader ?? 'off',
        limits: ready.cgroups ? 'cgroup-v1' : 'rlimits',
        note: ready.cgroupsNote,
      },
      'sandbox runtime ready',
    );
    return ready;
  }

  /** The syscall filter and its loader, or an error saying why there can be none on this host. */
  private filter(tools: Tools): SyscallFilter {
    const name = this.filterInterpreter ?? (tools.perl ? 'perl' : 'python3');
    const path = tools[name];
    const filter = path ? syscallFilter({ name, path }) : undefined;
    if (!filter) {
      throw new SigilError(
        'unavailable',
        path
          ? `the sandbox syscall filter has no syscall table for ${process.arch}`
          : `the sandbox syscall filter needs ${this.filterInterpreter ?? 'perl or python3'} on the host (in /usr/bin or /bin)`,
        {
          hint: 'install perl-base or python3, or set syscallFilter: off for the sandbox-linux-namespaces plugin',
        },
      );
    }
    return filter;
  }

  private filterStatus(): LinuxNamespacesStatus['syscallFilter'] {
    if (this.config.syscallFilter === 'off')
      return { enforced: false, reason: 'syscallFilter: off in config' };
    try {
      return this.filter(findTools()).status;
    } catch (error) {
      return { enforced: false, reason: (error as Error).message }; // and start() fails for the same reason
    }
  }

  /** A uid a sandbox may run as, for checks that any of them would pass alike. */
  private someSandboxUid(): number {
    return process.getuid?.() === 0 ? this.config.uidRange.first : (process.getuid?.() ?? 0);
  }

  /** One trivial sandbox, so a host that cannot build one fails at start-up, not at the first tool call. */
  private async selfTest(ready: Ready): Promise<void> {
    const probe = await this.launch(ready, {
      packagePath: ready.selfTestPackage,
      command: ready.tools.sh,
      args: ['-c', 'exit 0'],
      env: {},
      networkAllowList: [],
    });
    probe.stdout.resume();
    let stderr = '';
    probe.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exit = await probe.exited;
    if (exit.code !== 0) {
      const detail = exit.reason ?? (stderr.trim() || `exit code ${exit.code}`);
      throw new Error(`cannot build a sandbox on this host: ${detail}`);
    }
  }

  /**
   * The package directory itself must let the sandbox user in (it works there); the directories on
   * the way to it need not when the runtime is root, since it lends the package (pathsToLend).
   */
  private assertPackageReachable(packagePath: string, ready: Ready): void {
    const uid = this.someSandboxUid();
    const blocked = firstUnsearchable(packagePath, uid);
    if (blocked && (ready.sharedUid !== undefined || blocked.dir === packagePath)) {
      assertTraversable(packagePath, uid, 'the package directory');
    }
  }

  /**
   * The binds of `plan` whose source the sandbox user cannot reach by path (a directory on the way,
   * such as a mode-700 home, does not let it search), each with its mount point under `lentDir`.
   */
  private pathsToLend(plan: RootPlan, lentDir: string): Map<string, string> {
    const uid = this.someSandboxUid();
    const lent = new Map<string, string>();
    for (const bind of plan.binds) {
      if (firstUnsearchable(dirname(bind.source), uid))
        lent.set(bind.source, join(lentDir, String(lent.size)));
    }
    return lent;
  }

  private async launch(ready: Ready, input: SandboxSpec): Promise<LinuxSandboxProcess> {
    const parsed = specSchema.safeParse(input);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new SigilError(
        'invalid_request',
        `sandbox spec ${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid'}`,
      );
    }
    const spec = parsed.data;
    const limits = { ...this.limits, ...spec.limits };
    const network = spec.networkAllowList.length > 0;
    if (network && !ready.tools.ip) {
      throw new SigilError(
        'unavailable',
        "a network allow-list needs iproute2's `ip` to bring the sandbox's loopback up; install iproute2 or leave the allow-list empty",
      );
    }
    const command = resolveExecutable(spec.command);
    this.assertPackageReachable(spec.packagePath, ready);
    const node = network ? realpathSync(process.execPath) : undefined;
    const plan = planRoot({
      systemPaths: [...this.config.systemPaths, ...(network ? NETWORK_PATHS : [])],
      requiredPaths: [
        spec.packagePath,
        ...ready.chainFiles,
        // The programs it runs, and every executable or library it was given, bring their libraries.
        ...(await ready.dependencies.of([
          command,
          ...(node ? [node] : []),
          ...this.config.readOnlyPaths,
          ...(spec.readOnlyPaths ?? []),
        ])),
      ],
      ...(network ? { egressForwarder: ready.forwarder } : {}),
    });
    const root = ensureSkeleton(plan, join(ready.ownerDir, 'roots'));
    const id = randomBytes(6).toString('hex');
    const fstabFile = join(ready.ownerDir, 'spawn', `${id}.fstab`);
    const socketPath = join(ready.ownerDir, 'egress', `${id}.sock`);
    if (network && Buffer.byteLength(socketPath) > MAX_SOCKET_PATH) {
      throw new SigilError(
        'unavailable',
        `the sandbox state dir is too deep for a unix socket path (${socketPath})`,
        {
          hint: 'choose a shorter stateDir for the sandbox-linux-namespaces plugin',
        },
      );
    }
    const staging = join(ready.ownerDir, 'spawn', `${id}.root`);
    const lentDir = join(ready.ownerDir, 'spawn', `${id}.lent`);
    const lent = ready.sharedUid === undefined ? this.pathsToLend(plan, lentDir) : new Map<string, string>();
    const lendingFstabFile = join(lentDir, 'fstab');
    const resources = new Resources([fstabFile, socketPath, staging, lentDir]);
    let hostUid: number;
    try {
      const lease = ready.sharedUid === undefined ? await this.users.claim() : undefined;
      resources.uid = lease;
      hostUid = lease?.uid ?? (ready.sharedUid as number);
      if (network) {
        resources.proxy = new EgressProxy({
          socketPath,
          allowList: spec.networkAllowList,
          maxConnections: limits.egressConnections,
          headerTimeoutMs: this.config.egress.headerTimeoutMs,
          idleTimeoutMs: this.config.egress.idleTimeoutMs,
          addresses: this.egressAddresses,
          onDenied: (target) => this.logger.warn({ sandbox: id, target }, 'sandbox egress refused'),
        });
        await resources.proxy.listen();
      }
      mkdirSync(staging, { mode: 0o755 });
      if (lent.size > 0) prepareLending(plan, lent, lentDir, lendingFstabFile);
      writeFileSync(
        fstabFile,
        fstab({
          plan,
          lent,
          root,
          staging,
          tmpBytes: limits.tmpBytes,
          ...(network ? { egressSocket: socketPath } : {}),
        }),
        { mode: 0o644 },
      );
      if (ready.cgroups) {
        resources.cgroup = ready.cgroups.create(
          `${this.owner}-${id}`,
          { memoryBytes: limits.memoryBytes, pids: limits.pids, cpuQuota: this.config.cpuQuota },
          { uid: hostUid, gid: hostUid },
        );
      }
    } catch (error) {
      await resources.release();
      throw error;
    }
    const proxyUrl = `http://127.0.0.1:${this.config.proxyPort}`;
    const env: Record<string, string> = {
      PATH: dirname(command).startsWith('/usr/') ? DEFAULT_PATH : `${dirname(command)}:${DEFAULT_PATH}`,
      HOME: '/tmp',
      ...spec.env,
      // Set last, so the spec cannot point the server around the allow-list (it could reach nothing anyway).
      ...(network
        ? { HTTP_PROXY: proxyUrl, HTTPS_PROXY: proxyUrl, http_proxy: proxyUrl, https_proxy: proxyUrl }
        : {}),
    };
    const launch: LaunchInput = {
      tools: ready.tools,
      ...(ready.sharedUid === undefined ? { switchUser: hostUid } : {}),
      marker: marker(this.owner, id),
      ...(lent.size > 0 ? { lendingFstab: lendingFstabFile } : {}),
      fstab: fstabFile,
      staging,
      root,
      cwd: spec.cwd ?? spec.packagePath,
      cgroupProcs: resources.cgroup?.procsFiles ?? [],
      namespaceLimits: ready.namespaceLimits,
      coreToPipe: ready.coreToPipe,
      limits: {
        cpuSeconds: limits.cpuSeconds,
        pids: limits.pids,
        tmpBytes: limits.tmpBytes,
        openFiles: limits.openFiles,
        ...(resources.cgroup ? {} : { dataBytes: limits.memoryBytes }),
      },
      ...(node ? { egress: { node, port: this.config.proxyPort } } : {}),
      command,
      args: spec.args,
    };
    let child: ChildProcess;
    try {
      // The filter's loader (when there is one) installs it and execs the chain's first program.
      const [file, ...args] = [...(ready.filterLoader ?? []), ...launchCommand(launch)];
      child = spawn(file as string, args, {
        stdio: ['pipe', 'pipe', 'pipe', 'pipe'],
        // Nothing of the host's environment: the launch chain runs on none, the server on `env`.
        env: {},
        // Its own session: no controlling terminal, and no terminal signals from the runtime's.
        detached: true,
      });
    } catch (error) {
      await resources.release(); // spawn(2) itself failed (e.g. EAGAIN): nothing started
      throw error;
    }
    if (resources.cgroup && child.pid !== undefined) resources.cgroup.prime(child.pid);
    const sandbox = new LinuxSandboxProcess(child, {
      id,
      marker: launch.marker,
      outputBytes: limits.outputBytes,
      graceMs: this.config.killGraceMs,
      cgroup: resources.cgroup,
      memoryPerProcess: !resources.cgroup,
      release: () => resources.release(),
    });
    const envPipe = child.stdio[3] as NodeJS.WritableStream | null;
    envPipe?.on('error', () => undefined); // the setup failed before reading it: `exited` says why
    envPipe?.end(environmentScript(env));
    this.running.add(sandbox);
    void sandbox.exited.then(() => this.running.delete(sandbox));
    return sandbox;
  }
}

/**
 * Creates the mount points that `lent` paths are bound onto (empty on the host: only the launch's
 * own mount namespace mounts on them) and the fstab that binds them.
 */
function prepareLending(plan: RootPlan, lent: LentPaths, lentDir: string, lendingFstabFile: string): void {
  mkdirSync(lentDir, { mode: 0o755 });
  for (const bind of plan.binds) {
    const at = lent.get(bind.source);
    if (at === undefined) continue;
    if (bind.kind === 'dir') mkdirSync(at, { mode: 0o755 });
    else writeFileSync(at, '', { mode: 0o644 });
  }
  writeFileSync(lendingFstabFile, lendingFstab(lent), { mode: 0o600 });
}

/** Per-sandbox files, proxy and cgroup, released once the sandbox has ended. */
class Resources {
  proxy: EgressProxy | undefined;
  cgroup: SandboxCgroup | undefined;
  uid: UidLease | undefined;
  private released: Promise<void> | undefined;
  constructor(
    /**
     * Its fstab, egress socket, root staging and lent mount points: the last two are empty on the
     * host, since only the sandbox's own mount namespaces ever mount on them.
     */
    private readonly paths: readonly string[],
  ) {}

  release(): Promise<void> {
    this.released ??= this.releaseOnce();
    return this.released;
  }

  private async releaseOnce(): Promise<void> {
    await this.proxy?.close();
    await this.cgroup?.remove();
    await this.uid?.release();
    for (const path of this.paths) rmSync(path, { recursive: true, force: true });
  }
}
