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
 * The engine's defaults (moby 20.10 oci/defaults.go), with /proc/pressure made read-only too (its
 * files take writes, PSI triggers, from any user) and /sys/fs/cgroup: on a cgroup v1 host runc leaves
 * the tmpfs holding the controllers read-write (root's, mode 755), and a read-only bind over it is
 * what the container then sees.
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
  '/sys/fs/cgroup',
];

/**
 * /dev as a read-only tmpfs of its own: runc makes the standard devices in it (null, zero, full,
 * random, urandom, tty) before it turns read-only, and the engine then leaves out its own /dev mounts
 * (a read-write tmpfs, /dev/pts with its pty multiplexer, /dev/mqueue, /dev/shm). `dev` undoes the
 * engine's default `nodev` for tmpfs, without which none of those devices would open.
 */
const DEV_TMPFS = 'ro,dev,nosuid,noexec,size=64k,mode=755';

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
    // A container joining another's network namespace takes its host name and resolver files too.
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
      Tmpfs: {
        '/tmp': `rw,noexec,nosuid,nodev,size=${limits.tmpBytes},uid=${uid},gid=${uid}`,
        '/dev': DEV_TMPFS,
      },
      Mounts: body.mounts,
      CapDrop: ['ALL'],
      SecurityOpt: [
        'no-new-privileges',
        ...(hardening.seccompProfile === undefined ? [] : [`seccomp=${hardening.seccompProfile}`]),
      ],
      NetworkMode: hardening.networkMode,
      // The engine writes this host's nameservers and search domains into the container's
      // /etc/resolv.conf unless given its own; with no network, loopback (which answers nothing).
      ...(hardening.networkMode === 'none' ? { Dns: ['127.0.0.1'], DnsSearch: ['.'] } : {}),
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
