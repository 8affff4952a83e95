import type Docker from 'dockerode';
import type { ContainerLimits } from './config.ts';

/**
 * The engine's options for one container, constraint by constraint (README.md says how each is
 * proven): what every container of this plugin shares, whatever it runs.
 */

export interface Hardening {
  uid: number;
  limits: ContainerLimits;
  cpus: number;
  /** The seccomp profile's JSON text; undefined: the engine's default profile. */
  seccompProfile: string | undefined;
  /** The OCI runtime (`runc`, `runsc`, …). */
  runtime: string;
  init: boolean;
  /** `none`, or `container:<id>` to join the egress forwarder's network namespace (loopback only). */
  networkMode: string;
  labels: Record<string, string>;
}

/**
 * The engine's defaults (moby 20.10 oci/defaults.go), with /proc/pressure made read-only too: its
 * files take writes (PSI triggers) from any user, and the kit's probe counts what it can write.
 */
const MASKED_PATHS = [
  '/proc/asound',
  '/proc/acpi',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/sys/firmware',
  '/sys/devices/virtual/powercap',
];
const READONLY_PATHS = [
  '/proc/bus',
  '/proc/fs',
  '/proc/irq',
  '/proc/sys',
  '/proc/sysrq-trigger',
  '/proc/pressure',
];

/** A container's options with every constraint applied; `body` adds what it runs. */
export function hardenedContainer(
  hardening: Hardening,
  body: {
    image: string;
    entrypoint: string[];
    cmd: string[];
    workingDir: string;
    env: string[];
    mounts: Docker.MountSettings[];
    /** Whether the caller writes to its stdin (the server: yes; the forwarder: no). */
    stdin: boolean;
  },
): Docker.ContainerCreateOptions {
  const { uid, limits } = hardening;
  return {
    Image: body.image,
    Entrypoint: body.entrypoint,
    Cmd: body.cmd,
    WorkingDir: body.workingDir,
    Env: body.env,
    User: `${uid}:${uid}`,
    Labels: hardening.labels,
    // A container joining another's network namespace takes its host name too.
    ...(hardening.networkMode === 'none' ? { Hostname: 'sandbox' } : {}),
    Tty: false,
    AttachStdin: body.stdin,
    OpenStdin: body.stdin,
    // The container's stdin closes when the attach that carries it ends (the gateway's connection,
    // even when the gateway dies): a server that exits on end of input goes with it.
    StdinOnce: body.stdin,
    AttachStdout: true,
    AttachStderr: true,
    HostConfig: {
      ReadonlyRootfs: true,
      // uid/gid: the tmpfs belongs to the container's user whatever mode the image's /tmp has (the
      // engine copies that directory's mode onto the tmpfs, so `mode=` alone would not hold).
      Tmpfs: { '/tmp': `rw,noexec,nosuid,nodev,size=${limits.tmpBytes},uid=${uid},gid=${uid}` },
      Mounts: [
        ...body.mounts,
        // The engine mounts a writable mqueue filesystem here even with IPC mode none.
        {
          Type: 'tmpfs',
          Target: '/dev/mqueue',
          Source: '',
          ReadOnly: true,
          TmpfsOptions: { SizeBytes: 4096, Mode: 0o555 },
        },
      ],
      CapDrop: ['ALL'],
      SecurityOpt: [
        'no-new-privileges',
        ...(hardening.seccompProfile === undefined ? [] : [`seccomp=${hardening.seccompProfile}`]),
      ],
      NetworkMode: hardening.networkMode,
      // No /dev/shm, no IPC shared with anything.
      IpcMode: 'none',
      MaskedPaths: MASKED_PATHS,
      ReadonlyPaths: READONLY_PATHS,
      Memory: limits.memoryBytes,
      // Equal to Memory: no swap on top of it.
      MemorySwap: limits.memoryBytes,
      NanoCpus: Math.round(hardening.cpus * 1e9),
      PidsLimit: limits.pids,
      Ulimits: [
        { Name: 'nofile', Soft: limits.openFiles, Hard: limits.openFiles },
        // SIGXCPU at the soft limit says why the process ended; the hard limit (SIGKILL) backs it up.
        { Name: 'cpu', Soft: limits.cpuSeconds, Hard: limits.cpuSeconds + 1 },
        { Name: 'fsize', Soft: limits.tmpBytes, Hard: limits.tmpBytes },
        // 1 byte, not 0: a core_pattern pipe helper ignores RLIMIT_CORE except for this value, and a
        // core file needs a page; either way a crash writes no secret of the process to disk.
        { Name: 'core', Soft: 1, Hard: 1 },
      ],
      Init: hardening.init,
      Runtime: hardening.runtime,
      // stdout carries MCP messages, tool results among them: the engine keeps no log of them.
      LogConfig: { Type: 'none', Config: {} },
      AutoRemove: false,
      Privileged: false,
      ...({ CgroupnsMode: 'private' } as Docker.HostConfig),
    },
  };
}

/** A host path bound read-only at its own path. */
export const readOnlyBind = (path: string): Docker.MountSettings => ({
  Type: 'bind',
  Source: path,
  Target: path,
  ReadOnly: true,
  BindOptions: { Propagation: 'rprivate' },
});
