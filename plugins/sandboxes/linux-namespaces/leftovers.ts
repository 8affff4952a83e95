import { readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { CgroupV1 } from './cgroups.ts';

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

export interface ReapReport {
  processes: number;
  cgroups: number;
  stateDirs: number;
}

export interface ReapScope {
  /** The reaping runtime, whose own sandboxes are never leftovers. */
  owner: string;
  stateDir: string;
  cgroups: 'auto' | 'off';
}

/**
 * Kills what earlier runs of any runtime on this host left behind: processes, cgroups and state
 * directories whose owner process is gone. Normally there is nothing (a sandbox dies with its
 * runtime through PR_SET_PDEATHSIG), but a runtime killed in the instant between starting a
 * sandbox and the sandbox arming that signal, or a host crash, leaves some.
 */
export async function reapLeftovers(scope: ReapScope): Promise<ReapReport> {
  const leftover = (owner: string) => owner !== scope.owner && !ownerAlive(owner);
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
  const cgroups = scope.cgroups === 'auto' ? CgroupV1.detect() : undefined;
  if (cgroups instanceof CgroupV1) {
    for (const name of cgroups.names()) {
      if (!leftover(name.split('-')[0] ?? '')) continue;
      await cgroups.open(name).remove();
      report.cgroups++;
    }
  }
  let entries: string[] = [];
  try {
    entries = readdirSync(scope.stateDir);
  } catch {
    // no state dir yet
  }
  for (const entry of entries) {
    const owner = /^(\d+\.\d+)-[0-9a-f]+$/.exec(entry)?.[1];
    if (owner === undefined || !leftover(owner)) continue;
    rmSync(join(scope.stateDir, entry), { recursive: true, force: true });
    report.stateDirs++;
  }
  return report;
}
