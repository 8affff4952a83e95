import { readdirSync, readFileSync } from 'node:fs';

/**
 * Who owns a sandbox, so that a later run can tell leftovers from live sandboxes. The owner is the
 * runtime's process, named by pid and start time (a pid alone is reused). Every process of the launch
 * chain carries `sigil-sandbox:<owner>:<id>` in its command line, every cgroup and state directory
 * is named after its owner, and anything whose owner is no longer running is a leftover.
 */

export const MARKER_PREFIX = 'sigil-sandbox:';

/** Start time of a process in clock ticks since boot (field 22 of /proc/<pid>/stat), or undefined. */
export function startTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) may hold spaces and parentheses: count fields after its closing one.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    return undefined;
  }
}

/** `<pid>.<start time>` of this process. */
export function currentOwner(): string {
  return `${process.pid}.${startTime(process.pid) ?? '0'}`;
}

export function ownerAlive(owner: string): boolean {
  const [pid, start] = owner.split('.');
  return pid !== undefined && /^\d+$/.test(pid) && startTime(Number(pid)) === start;
}

export const marker = (owner: string, id: string) => `${MARKER_PREFIX}${owner}:${id}`;

export interface MarkedProcess {
  pid: number;
  owner: string;
  id: string;
}

/** Host processes whose command line carries a sandbox marker. */
export function markedProcesses(): MarkedProcess[] {
  const found: MarkedProcess[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${entry}/cmdline`, 'latin1');
    } catch {
      continue; // exited meanwhile
    }
    const match = /(?:^|\0)sigil-sandbox:(\d+\.\d+):([0-9a-f]+)(?:\0|$)/.exec(cmdline);
    if (match) found.push({ pid: Number(entry), owner: match[1] as string, id: match[2] as string });
  }
  return found;
}
