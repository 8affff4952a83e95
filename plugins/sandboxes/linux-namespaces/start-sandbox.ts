import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, realpathSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Duplex } from 'node:stream';
import { type PluginLogger, SigilError } from '@sigil/plugin-api';
import type { EnforcedSandboxLimits } from '@sigil/plugin-api/sandbox';
import type { LinuxNamespacesConfig } from './config.ts';
import type { EgressAddresses } from '@sigil/plugin-api/egress';
import { EgressProxy } from '@sigil/plugin-api/egress';
import { DEFAULT_PATH, someSandboxUid } from './host.ts';
import { environmentScript, launchCommand, type LaunchInput } from './launch.ts';
import { marker } from './leftovers.ts';
import { assertPackageReachable, pathsToLend, prepareLending } from './lending.ts';
import type { PreparedHost } from './prepare-host.ts';
import { ensureSkeleton, fstab, planRoot } from './root.ts';
import { SandboxResources } from './sandbox-resources.ts';
import { LinuxSandboxProcess } from './sandbox-process.ts';
import type { HostRun } from './spec.ts';
import type { UidAllocator } from './uids.ts';

/** CA certificates (Debian's /etc/ssl/certs links into /usr/share/ca-certificates), for an allow-list only. */
const NETWORK_PATHS = ['/etc/ssl', '/usr/share/ca-certificates', '/etc/pki'];
/** sun_path holds 108 bytes with its terminating NUL. */
const MAX_SOCKET_PATH = 107;

/** What a runtime shares among its sandboxes. */
export interface SandboxContext {
  config: LinuxNamespacesConfig;
  /** The config's limits over the defaults; a spec's own override them. */
  limits: EnforcedSandboxLimits;
  owner: string;
  logger: PluginLogger;
  users: UidAllocator;
  egressAddresses: EgressAddresses;
}

/** What a sandbox is built from: a host run but its environment, which reaches only the server. */
export type SandboxPlan = Omit<HostRun, 'env'>;

/** A sandbox built and waiting, before its server runs: its init reads the environment first. */
export interface PreparedSandbox {
  readonly process: LinuxSandboxProcess;
  /** True once the sandbox is set up and its init waits for the environment; false if it ended first. */
  readonly ready: Promise<boolean>;
  /** Hands the init the server's environment, and so runs the server. Once only. */
  begin(env: Readonly<Record<string, string>>): LinuxSandboxProcess;
}

/** One sandbox running `spec` (prepareSandbox, then begun with the spec's environment). */
export async function startSandbox(
  context: SandboxContext,
  host: PreparedHost,
  spec: HostRun,
): Promise<LinuxSandboxProcess> {
  const { env, ...plan } = spec;
  return (await prepareSandbox(context, host, plan)).begin(env);
}

/**
 * One sandbox of `spec`: its root planned and mounted from an fstab, a host uid, the egress proxy of
 * its allow-list and its cgroup claimed, then the launch chain spawned, which sets the sandbox up and
 * waits, unprivileged and filtered, for the server's environment. What was claimed is released when
 * the sandbox ends, or at once when it cannot start.
 */
export async function prepareSandbox(
  context: SandboxContext,
  host: PreparedHost,
  spec: SandboxPlan,
): Promise<PreparedSandbox> {
  const { config } = context;
  const limits = { ...context.limits, ...spec.limits };
  const network = spec.networkAllowList.length > 0;
  if (network && !host.tools.ip) {
    throw new SigilError(
      'unavailable',
      "a network allow-list needs iproute2's `ip` to bring the sandbox's loopback up; install iproute2 or leave the allow-list empty",
    );
  }
  const { command } = spec;
  // As root each sandbox has a uid of its own, and what that uid cannot reach is lent to it.
  const lends = host.sharedUid === undefined;
  const sandboxUid = someSandboxUid(config.uidRange);
  assertPackageReachable(spec.root, sandboxUid, lends);
  const node = network ? realpathSync(process.execPath) : undefined;
  const filter = host.syscallFilter;
  const plan = planRoot({
    systemPaths: [...config.systemPaths, ...(network ? NETWORK_PATHS : [])],
    requiredPaths: [
      spec.root,
      ...host.chainFiles,
      ...(filter?.needs ?? []),
      ...spec.runtimeNeeds,
      // The programs it runs, and every executable or library it was given, bring their libraries.
      ...(await host.dependencies.of([
        command,
        ...(node ? [node] : []),
        ...config.readOnlyPaths,
        ...spec.readOnlyPaths,
      ])),
    ],
    ...(network ? { egressForwarder: host.forwarder } : {}),
    hidden: { paths: [...(filter?.hidden ?? []), ...spec.hidden], emptyDir: host.emptyDir },
  });
  const root = ensureSkeleton(plan, join(host.ownerDir, 'roots'));
  const id = randomBytes(6).toString('hex');
  const fstabFile = join(host.ownerDir, 'spawn', `${id}.fstab`);
  const socketPath = join(host.ownerDir, 'egress', `${id}.sock`);
  if (network && Buffer.byteLength(socketPath) > MAX_SOCKET_PATH) {
    throw new SigilError(
      'unavailable',
      `the sandbox state dir is too deep for a unix socket path (${socketPath})`,
      {
        hint: 'choose a shorter stateDir for the sandbox-linux-namespaces plugin',
      },
    );
  }
  const staging = join(host.ownerDir, 'spawn', `${id}.root`);
  const lentDir = join(host.ownerDir, 'spawn', `${id}.lent`);
  const lent = lends ? pathsToLend(plan, lentDir, sandboxUid) : new Map<string, string>();
  const lendingFstabFile = join(lentDir, 'fstab');
  const resources = new SandboxResources([fstabFile, socketPath, staging, lentDir]);
  let hostUid: number;
  try {
    const lease = lends ? await context.users.claim() : undefined;
    resources.uid = lease;
    hostUid = lease?.uid ?? (host.sharedUid as number);
    if (network) {
      resources.proxy = new EgressProxy({
        socketPath,
        allowList: spec.networkAllowList,
        maxConnections: limits.egressConnections,
        headerTimeoutMs: config.egress.headerTimeoutMs,
        idleTimeoutMs: config.egress.idleTimeoutMs,
        addresses: context.egressAddresses,
        onDenied: (target) => context.logger.warn({ sandbox: id, target }, 'sandbox egress refused'),
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
    if (host.cgroups) {
      resources.cgroup = host.cgroups.create(
        `${context.owner}-${id}`,
        {
          memoryBytes: limits.memoryBytes,
          pids: limits.pids,
          cpuQuota: config.cpuQuota,
          cpuBurst: config.cpuBurst,
        },
        { uid: hostUid, gid: hostUid },
      );
    }
  } catch (error) {
    await resources.release();
    throw error;
  }
  const launch: LaunchInput = {
    tools: host.tools,
    ...(lends ? { switchUser: hostUid } : {}),
    marker: marker(context.owner, id),
    ...(lent.size > 0 ? { lendingFstab: lendingFstabFile } : {}),
    fstab: fstabFile,
    staging,
    root,
    cwd: spec.cwd,
    cgroupProcs: resources.cgroup?.procsFiles ?? [],
    namespaceLimits: host.namespaceLimits,
    coreToPipe: host.coreToPipe,
    limits: {
      cpuSeconds: limits.cpuSeconds,
      pids: limits.pids,
      tmpBytes: limits.tmpBytes,
      openFiles: limits.openFiles,
      ...(resources.cgroup ? {} : { dataBytes: limits.memoryBytes }),
    },
    ...(node ? { egress: { node, port: config.proxyPort } } : {}),
    ...(filter
      ? { syscallFilter: { interpreter: filter.filter.interpreter, args: filter.filter.loaderArgs } }
      : {}),
    command,
    args: spec.args,
  };
  let child: ChildProcess;
  try {
    const [file, ...args] = launchCommand(launch);
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
    graceMs: config.killGraceMs,
    cgroup: resources.cgroup,
    memoryPerProcess: !resources.cgroup,
    release: () => resources.release(),
  });
  const envPipe = child.stdio[3] as Duplex | null;
  envPipe?.on('error', () => undefined); // the setup failed before reading it: `exited` says why
  const ready = new Promise<boolean>((resolve) => {
    envPipe?.once('data', () => resolve(true));
    void sandbox.exited.then(() => resolve(false));
  });
  return {
    process: sandbox,
    ready,
    begin: (env) => {
      envPipe?.end(environmentScript(serverEnvironment(command, env, network, config.proxyPort)));
      return sandbox;
    },
  };
}

/** The server's environment: a PATH and HOME, the spec's variables, and the proxy of an allow-list. */
function serverEnvironment(
  command: string,
  specEnv: Readonly<Record<string, string>>,
  network: boolean,
  proxyPort: number,
): Record<string, string> {
  const proxyUrl = `http://127.0.0.1:${proxyPort}`;
  return {
    PATH: dirname(command).startsWith('/usr/') ? DEFAULT_PATH : `${dirname(command)}:${DEFAULT_PATH}`,
    HOME: '/tmp',
    ...specEnv,
    // Set last, so the spec cannot point the server around the allow-list (it could reach nothing anyway).
    ...(network
      ? { HTTP_PROXY: proxyUrl, HTTPS_PROXY: proxyUrl, http_proxy: proxyUrl, https_proxy: proxyUrl }
      : {}),
  };
}
