import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { lstatSync, mkdirSync, rmSync } from 'node:fs';
import type { Duplex } from 'node:stream';
import { join } from 'node:path';
import type Docker from 'dockerode';
import type { PluginLogger, SandboxRuntimeV2, SandboxSpecV2, SandboxStatus } from '@sigil/plugin-api';
import { SigilError } from '@sigil/plugin-api';
import { DEFAULT_LIMITS, type ContainerLimits, type DockerSandboxConfig } from './config.ts';
import { hardenedContainer, readOnlyBind, type Hardening } from './container-config.ts';
import { DockerSandboxProcess } from './docker-process.ts';
import { EgressAddresses } from '@sigil/plugin-api/egress';
import { startEgress, type Egress } from './egress.ts';
import { Engine } from './engine.ts';
import { containerEntry, environmentPreamble } from './env-wrapper.ts';
import { Images } from './images.ts';
import { reapLeftovers, startWatchdog, uidsInUse } from './leftovers.ts';
import { currentOwner, instanceDirName, LABELS, ownerLabels, type Owner } from './owner.ts';
import { profileFor, syscallFilterStatus } from './seccomp-profile.ts';
import { resolveProgram } from './program.ts';
import { checkSpec, type CheckedSpec } from './spec.ts';
import { attachStdio, fifoStdio, type ContainerStdio } from './stdio.ts';
import { createClaiming, UidAllocator } from './uids.ts';

/** What the engine said of itself at the last contact; `status()` reads only this. */
interface EngineState {
  reachable: boolean;
  checkedAt: string;
  error?: string;
  version?: string;
  apiVersion?: string;
  architecture?: string;
  runtimes?: Record<string, { path?: string; runtimeArgs?: string[] }>;
  userNamespaces?: boolean;
}

export interface RuntimeOptions {
  config: DockerSandboxConfig;
  logger: PluginLogger;
  /** Who owns this runtime's containers; this process unless a test stands in for another one. */
  owner?: Owner;
}

/**
 * The `sandbox-runtime` (v2) on a Docker engine, through dockerode: each server in a container of
 * its own with every constraint of the contract (container-config.ts), host programs in an image of
 * their interpreter with the install root bound read-only, images by digest, a network allow-list
 * through an egress forwarder (egress.ts), and nothing left behind (watchdog.cjs, leftovers.ts).
 */
export class DockerRuntime implements SandboxRuntimeV2 {
  readonly specVersion = 'v2' as const;
  readonly owner: Owner;
  readonly engine: Engine;
  private readonly config: DockerSandboxConfig;
  private readonly logger: PluginLogger;
  private readonly images: Images;
  private readonly uids: UidAllocator;
  private readonly addresses: EgressAddresses;
  private readonly running = new Set<DockerSandboxProcess>();
  private engineState: EngineState = {
    reachable: false,
    checkedAt: new Date(0).toISOString(),
    error: 'not yet contacted',
  };
  private seccompProfile: string | undefined;
  private ready: Promise<void> | undefined;
  private watchdog: ChildProcess | undefined;
  private stopped = false;

  constructor(options: RuntimeOptions) {
    this.config = options.config;
    this.logger = options.logger;
    this.owner = options.owner ?? currentOwner();
    this.engine = new Engine(options.config.engine);
    this.images = new Images(
      this.engine,
      options.config.pullTimeoutMs,
      () => this.engineState.architecture ?? 'x86_64',
    );
    this.uids = new UidAllocator(options.config.uidRange);
    this.addresses = new EgressAddresses(options.config.egress.privateRanges);
  }

  /**
   * Contacts the engine, reaps what dead gateways of this host left and starts the watchdog. An
   * engine that is down does not stop the gateway: it is logged, `status()` says so, and each spawn
   * tries again (and fails `unavailable` while it stays down).
   */
  async start(): Promise<void> {
    try {
      await this.prepare();
    } catch (error) {
      this.logger.warn(
        { engine: this.engine.address, error: (error as Error).message },
        'Docker engine not ready',
      );
    }
  }

  /** Kills every container of this runtime, then lets the watchdog go (it finds nothing left). */
  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all([...this.running].map((sandbox) => sandbox.kill()));
    this.watchdog?.stdin?.end();
    rmSync(this.instanceDir(), { recursive: true, force: true });
  }

  async spawn(spec: SandboxSpecV2): Promise<DockerSandboxProcess> {
    const checked = checkSpec(spec);
    await this.prepare();
    try {
      return await this.launch(checked);
    } catch (error) {
      if ((error as SigilError).details?.reason === 'engine_unreachable') {
        // Gone since it was last seen: status() says so, and the next spawn contacts it afresh.
        this.engineState = {
          ...this.engineState,
          reachable: false,
          checkedAt: new Date().toISOString(),
          error: (error as Error).message,
        };
        this.ready = undefined;
      }
      throw error;
    }
  }

  status(): Promise<SandboxStatus> {
    const engine = this.engineState;
    const runtimeArgs = engine.runtimes?.[this.config.runtime]?.runtimeArgs ?? [];
    const gvisor = this.isGvisor();
    return Promise.resolve({
      runtime: 'docker',
      runs: {
        host:
          engine.reachable && this.engine.local
            ? (['node', 'python', 'binary'] as const).filter(
                (runtime) => this.config.images[runtime] !== undefined,
              )
            : [],
        image: engine.reachable,
      },
      namespaces: [
        'mount',
        'pid',
        'network',
        'ipc',
        'uts',
        'cgroup',
        ...(engine.userNamespaces ? ['user'] : []),
      ],
      limits: 'engine',
      network: this.engine.local
        ? 'none; an allow-list only through a forwarder container on loopback and the gateway’s HTTP proxy'
        : 'none (allow-lists need a local engine)',
      syscallFilter:
        gvisor && !runtimeArgs.includes('--oci-seccomp')
          ? {
              enforced: false,
              reason: `gVisor (${this.config.runtime}) answers system calls in its own kernel and does not apply the seccomp profile (runtime argument --oci-seccomp would)`,
            }
          : syscallFilterStatus(this.config.seccomp),
      running: this.running.size,
      details: {
        engine: {
          address: this.engine.address,
          reachable: engine.reachable,
          checkedAt: engine.checkedAt,
          ...(engine.error ? { error: engine.error } : {}),
          ...(engine.version ? { version: engine.version, apiVersion: engine.apiVersion } : {}),
        },
        ociRuntime: { name: this.config.runtime, gvisor, ...(runtimeArgs.length ? { runtimeArgs } : {}) },
        seccomp: this.config.seccomp,
        secretDelivery: this.config.secretDelivery,
        images: this.config.images,
        users: { range: this.config.uidRange, inUse: this.uids.inUse },
      },
    });
  }

  /** Removes containers that dead gateways of this host left (leftovers.ts); run by start() too. */
  reapLeftovers(): Promise<number> {
    return reapLeftovers(this.engine, this.owner, this.config.stateDir, this.logger);
  }

  /** The watchdog's pid (for the tests that kill a gateway and its watchdog at once). */
  get watchdogPid(): number | undefined {
    return this.watchdog?.pid;
  }

  private prepare(): Promise<void> {
    if (this.stopped)
      return Promise.reject(new SigilError('unavailable', 'the Docker sandbox runtime is stopped'));
    this.ready ??= this.boot().catch((error: unknown) => {
      // Tried again by the next spawn: the engine may come up later.
      this.ready = undefined;
      throw error;
    });
    return this.ready;
  }

  private async boot(): Promise<void> {
    const checkedAt = new Date().toISOString();
    try {
      await this.engine.ping();
      const [info, version] = await Promise.all([
        this.engine.call('to describe itself', () => this.engine.api.info() as Promise<EngineInfo>),
        this.engine.call('to give its version', () => this.engine.api.version()),
      ]);
      this.engineState = {
        reachable: true,
        checkedAt,
        version: version.Version,
        apiVersion: version.ApiVersion,
        architecture: info.Architecture,
        runtimes: info.Runtimes ?? {},
        userNamespaces: (info.SecurityOptions ?? []).some((option) => option.includes('name=userns')),
      };
    } catch (error) {
      this.engineState = { reachable: false, checkedAt, error: (error as Error).message };
      throw error;
    }
    if (!this.engineState.runtimes?.[this.config.runtime]) {
      throw new SigilError(
        'unavailable',
        `the Docker engine at ${this.engine.address} has no OCI runtime "${this.config.runtime}" (it has ${Object.keys(this.engineState.runtimes ?? {}).join(', ')}); register it, e.g. dockerd --add-runtime ${this.config.runtime}=/usr/bin/${this.config.runtime}`,
        { details: { reason: 'oci_runtime_missing' } },
      );
    }
    this.seccompProfile = profileFor(this.config.seccomp, this.engineState.architecture ?? 'x86_64');
    prepareStateDir(this.config.stateDir);
    await this.reapLeftovers();
    this.watchdog ??= startWatchdog({
      connection: this.engine.connection,
      instanceLabel: `${LABELS.instance}=${this.owner.instance}`,
      stateDir: this.instanceDir(),
      logger: this.logger,
    });
    this.logger.info(
      {
        engine: this.engine.address,
        version: this.engineState.version,
        runtime: this.config.runtime,
        seccomp: this.config.seccomp,
      },
      'Docker sandbox runtime ready',
    );
  }

  private instanceDir(): string {
    return join(this.config.stateDir, instanceDirName(this.owner));
  }

  /**
   * Launches `spec` under a uid no other container holds: one that neither the engine's list nor this
   * runtime holds and, when another gateway claimed the same one an instant earlier (`uid_taken`),
   * another, until the range has none left (each refused uid is left out of the next pick).
   */
  private async launch(spec: CheckedSpec): Promise<DockerSandboxProcess> {
    const refused = new Set<number>();
    for (;;) {
      try {
        return await this.launchUnder(spec, refused);
      } catch (error) {
        const details = (error as SigilError).details;
        if (details?.reason !== 'uid_taken') throw error;
        refused.add(details.uid as number);
      }
    }
  }

  private async launchUnder(spec: CheckedSpec, refused: ReadonlySet<number>): Promise<DockerSandboxProcess> {
    const id = randomBytes(6).toString('hex');
    const limits: ContainerLimits = { ...DEFAULT_LIMITS, ...this.config.limits, ...spec.limits };
    const [program, inUse] = await Promise.all([
      resolveProgram(spec.launch, { config: this.config, engine: this.engine, images: this.images }),
      uidsInUse(this.engine),
    ]);
    const uid = this.uids.claim(new Set([...inUse, ...refused]));
    let egress: Egress | undefined;
    let container: Docker.Container | undefined;
    let stdio: ContainerStdio | undefined;
    const release = async () => {
      stdio?.destroy();
      await container?.remove({ force: true, v: true }).catch(() => undefined);
      await egress?.release();
      rmSync(join(this.instanceDir(), id), { recursive: true, force: true });
      this.uids.release(uid);
    };
    try {
      const labels = {
        ...ownerLabels(this.owner),
        [LABELS.uid]: String(uid),
        [LABELS.role]: 'server',
        ...Object.fromEntries(
          Object.entries(spec.labels ?? {}).map(([name, value]) => [`${LABELS.caller}${name}`, value]),
        ),
      };
      const hardening: Hardening = {
        uid,
        limits,
        cpus: this.config.cpus,
        seccompProfile: this.seccompProfile,
        runtime: this.config.runtime,
        init: this.config.init,
        networkMode: 'none',
        labels,
      };
      if (spec.networkAllowList.length > 0) {
        egress = await startEgress({
          engine: this.engine,
          config: this.config,
          addresses: this.addresses,
          dir: join(this.instanceDir(), id, 'egress'),
          allowList: spec.networkAllowList,
          limits,
          image: (await this.forwarderImage()).id,
          hardening: { ...hardening, labels: { ...labels } },
          onDenied: (target) => this.logger.warn({ sandbox: id, target }, 'egress refused'),
        });
        hardening.networkMode = egress.networkMode;
      }
      const viaStdin = this.config.secretDelivery === 'stdin' && Object.keys(spec.env).length > 0;
      const env = {
        ...program.env,
        HOME: '/tmp',
        ...(viaStdin ? {} : spec.env),
      };
      const shell = await this.images.hasShell(program.image, ownerLabels(this.owner));
      if (viaStdin && !shell) {
        throw new SigilError(
          'unavailable',
          `the image ${program.reference} has no /bin/sh to take the environment over stdin (secretDelivery 'stdin'); use an image with one, or secretDelivery 'env'`,
          { details: { reason: 'image_without_shell' } },
        );
      }
      // gVisor cannot open a host's named pipe through its file proxy.
      const fifo = this.config.stdio === 'auto' && this.engine.local && !this.isGvisor() && shell;
      const fifoDir = join(this.instanceDir(), id, 'stdio');
      if (fifo) mkdirSync(fifoDir, { recursive: true, mode: 0o711 });
      const entry = containerEntry(program.command, {
        shell,
        init: this.config.init,
        fifoDir: fifo ? fifoDir : undefined,
        environment: viaStdin,
        keepHostname: 'HOSTNAME' in env,
      });
      const options = hardenedContainer(
        { ...hardening, init: entry.engineInit },
        {
          image: program.image,
          entrypoint: entry.entrypoint,
          cmd: entry.cmd,
          workingDir: program.workingDir,
          env: [...Object.entries(env).map(([name, value]) => `${name}=${value}`), ...(egress?.env ?? [])],
          mounts: [...program.mounts, ...(fifo ? [readOnlyBind(fifoDir)] : [])],
          stdin: !fifo,
        },
      );
      // The sandbox's first container claims its uid (a forwarder, when there is one, did).
      const created = egress
        ? await this.engine.call('to create the container', () =>
            this.engine.api.createContainer({ ...options, name: `sigil-${id}` }),
          )
        : await createClaiming(this.engine, uid, 'to create the container', options);
      container = created;
      stdio = fifo
        ? await fifoStdio(fifoDir, uid)
        : attachStdio(
            this.engine,
            (await this.engine.call('to attach to the container', () =>
              this.engine.streams
                .getContainer(created.id)
                .attach({ stream: true, hijack: true, stdin: true, stdout: true, stderr: true }),
            )) as unknown as Duplex,
          );
      const sandbox = new DockerSandboxProcess({
        engine: this.engine,
        containerId: created.id,
        stdio,
        outputBytes: limits.outputBytes,
        graceMs: this.config.killGraceMs,
        preamble: viaStdin ? environmentPreamble(spec.env) : undefined,
        release,
      });
      this.running.add(sandbox);
      void sandbox.exited.then(() => this.running.delete(sandbox));
      await sandbox.start();
      return sandbox;
    } catch (error) {
      await release();
      if ((error as SigilError).details?.status === 404) this.images.forget(program.reference);
      throw error;
    }
  }

  private async forwarderImage() {
    const reference = this.config.egress.image ?? this.config.images.node;
    if (reference === undefined) {
      throw new SigilError(
        'unavailable',
        'a network allow-list needs an image with node for its forwarder (set egress.image or images.node)',
        {
          details: { reason: 'egress_image_missing' },
        },
      );
    }
    return this.images.resolve(reference);
  }

  private isGvisor(): boolean {
    const path = this.engineState.runtimes?.[this.config.runtime]?.path ?? this.config.runtime;
    return /runsc/.test(path);
  }
}

/**
 * The directory of the stdio pipes and egress sockets: made if missing, and refused unless it is a
 * directory of this process's user that no one else may write to (in a shared /tmp, another user
 * could otherwise have made it first and swapped what the containers are given).
 */
function prepareStateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o711 });
  const stat = lstatSync(dir);
  const uid = process.getuid?.() ?? stat.uid;
  if (!stat.isDirectory() || stat.uid !== uid || (stat.mode & 0o022) !== 0) {
    throw new SigilError(
      'config_invalid',
      `stateDir ${dir} must be a directory of uid ${uid} that only it may write to`,
      { details: { reason: 'state_dir_unsafe' } },
    );
  }
}

interface EngineInfo {
  Architecture: string;
  Runtimes?: Record<string, { path?: string; runtimeArgs?: string[] }>;
  SecurityOptions?: string[];
}
