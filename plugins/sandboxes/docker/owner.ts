import { randomBytes } from 'node:crypto';
import { readFileSync, readlinkSync } from 'node:fs';
import { hostname } from 'node:os';

/**
 * Who a container belongs to, as labels on it, so that the engine's own list says which containers
 * are whose: every container of this plugin carries {@link LABELS.sandbox}; those of one runtime
 * instance its random {@link LABELS.instance} (the watchdog removes them by it); and the owner
 * process by host, PID namespace and pid with its start time (a pid alone is reused), from which a
 * later start on the same host tells a dead owner's leftovers from a live gateway's containers.
 */

const PREFIX = 'io.sigil.sandbox';

export const LABELS = {
  sandbox: PREFIX,
  instance: `${PREFIX}.instance`,
  ownerHost: `${PREFIX}.owner-host`,
  ownerPidNamespace: `${PREFIX}.owner-pidns`,
  ownerProcess: `${PREFIX}.owner-process`,
  uid: `${PREFIX}.uid`,
  /** `server`, or `egress` for the forwarder of a server's allow-list. */
  role: `${PREFIX}.role`,
  /** The spec's `labels`, each under this prefix. */
  caller: 'io.sigil.label.',
} as const;

export interface Owner {
  instance: string;
  host: string;
  pidNamespace: string;
  /** `<pid>.<start time in clock ticks since boot>`. */
  process: string;
}

export function currentOwner(): Owner {
  return {
    instance: randomBytes(8).toString('hex'),
    host: hostname(),
    pidNamespace: pidNamespace(),
    process: `${process.pid}.${startTime(process.pid) ?? '0'}`,
  };
}

export function ownerLabels(owner: Owner): Record<string, string> {
  return {
    [LABELS.sandbox]: 'docker',
    [LABELS.instance]: owner.instance,
    [LABELS.ownerHost]: owner.host,
    [LABELS.ownerPidNamespace]: owner.pidNamespace,
    [LABELS.ownerProcess]: owner.process,
  };
}

/**
 * Whether the owner named by a container's labels is known to be gone: it ran on this host, in this
 * PID namespace, and no process with its pid and start time runs now. An owner elsewhere is never
 * judged (its host's next start reaps what it left).
 */
export function ownerGone(labels: Readonly<Record<string, string>>, self: Owner): boolean {
  if (labels[LABELS.ownerHost] !== self.host) return false;
  return processGone(labels[LABELS.ownerPidNamespace] ?? '', labels[LABELS.ownerProcess] ?? '', self);
}

/** The name of an instance's state directory: its owner's PID namespace and process, and the instance. */
export function instanceDirName(owner: Owner): string {
  return `${/\d+/.exec(owner.pidNamespace)?.[0] ?? '0'}.${owner.process}.${owner.instance}`;
}

/** Whether the instance whose state directory is `name` belonged to an owner that is gone. */
export function instanceDirGone(name: string, self: Owner): boolean {
  const match = /^(\d+)\.(\d+\.\d+)\.[0-9a-f]{16}$/.exec(name);
  return match !== null && processGone(`pid:[${match[1]}]`, match[2] as string, self);
}

function processGone(pidNamespace: string, ownerProcess: string, self: Owner): boolean {
  if (pidNamespace !== self.pidNamespace || ownerProcess === self.process) return false;
  const [pid, start] = ownerProcess.split('.');
  if (!pid || !/^\d+$/.test(pid)) return false;
  return startTime(Number(pid)) !== start;
}

function pidNamespace(): string {
  try {
    return readlinkSync('/proc/self/ns/pid');
  } catch {
    return 'unknown';
  }
}

/** Field 22 of /proc/<pid>/stat; the command name before it may hold spaces and parentheses. */
function startTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}
