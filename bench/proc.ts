/**
 * Processes for benchmarks: plain starts of a program (the baselines of sandboxed starts), and CPU
 * accounting from /proc for benchmarks whose work runs in other processes (MCP servers in a sandbox,
 * started through a chain of setpriv, unshare and sh): every live descendant of a process, found by
 * walking parent pids, and the children this process has already waited for.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { join } from 'node:path';

/** Linux reports utime and stime in clock ticks: 100 per second on every mainstream build. */
const US_PER_TICK = 10_000;

interface Stat {
  ppid: number;
  cpuUs: number;
  /** CPU of its children that have ended and been waited for (cutime + cstime). */
  reapedCpuUs: number;
}

function statOf(pid: string | number): Stat | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined; // ended meanwhile
  }
  // After the command name (which may hold spaces and parentheses): state ppid … utime(14) stime(15).
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return {
    ppid: Number(fields[1]),
    cpuUs: (Number(fields[11]) + Number(fields[12])) * US_PER_TICK,
    reapedCpuUs: (Number(fields[13]) + Number(fields[14])) * US_PER_TICK,
  };
}

/** Live descendants of `root` (not `root` itself), by pid, with the CPU each has used so far. */
export function descendants(root: number = process.pid): Map<number, number> {
  const children = new Map<number, { pid: number; cpuUs: number }[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = statOf(entry);
    if (!stat) continue;
    const siblings = children.get(stat.ppid) ?? [];
    siblings.push({ pid: Number(entry), cpuUs: stat.cpuUs });
    children.set(stat.ppid, siblings);
  }
  const found = new Map<number, number>();
  const queue = [root];
  while (queue.length > 0) {
    for (const child of children.get(queue.pop() as number) ?? []) {
      found.set(child.pid, child.cpuUs);
      queue.push(child.pid);
    }
  }
  return found;
}

/** CPU (µs) used by live descendants of `root` between two snapshots, counting new ones from zero. */
export function cpuBetween(before: Map<number, number>, after: Map<number, number>): number {
  let total = 0;
  for (const [pid, cpu] of after) total += cpu - (before.get(pid) ?? 0);
  return total;
}

/** CPU (µs) of this process's children that have ended and been waited for (cutime + cstime). */
export function reapedChildrenCpuUs(): number {
  return statOf('self')?.reapedCpuUs ?? 0;
}

/** The CPU (µs) process `pid` has used itself, all its threads, not its children's; 0 once it has ended. */
export function processCpuUs(pid: number): number {
  return statOf(pid)?.cpuUs ?? 0;
}

/** What the processes under `root` have used: the live ones by pid, and the ended ones `root` waited for. */
export interface ChildrenCpu {
  live: Map<number, number>;
  reapedUs: number;
}

export function childrenCpu(root: number): ChildrenCpu {
  return { live: descendants(root), reapedUs: statOf(root)?.reapedCpuUs ?? 0 };
}

/**
 * CPU (µs) used under a process between two snapshots, by children that lived throughout, started, or
 * ended meanwhile (a child that ended counts from the first snapshot on: its reaped total less what
 * it had then). For a server that starts a process per request, whose children come and go.
 */
export function childrenCpuBetween(before: ChildrenCpu, after: ChildrenCpu): number {
  let ended = 0;
  for (const [pid, cpu] of before.live) if (!after.live.has(pid)) ended += cpu;
  return cpuBetween(before.live, after.live) + after.reapedUs - before.reapedUs - ended;
}

/** The resident set of process `pid` in kB (VmRSS); 0 once it has ended. */
export function rssKb(pid: number): number {
  try {
    return Number(/^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  } catch {
    return 0;
  }
}

/** This process's own CPU (user + system), in µs. */
export function ownCpuUs(): number {
  const usage = process.cpuUsage();
  return usage.user + usage.system;
}

/** CPU (µs) of this process's main thread alone: the event loop's, without libuv's pool (SQLite, fs). */
export function mainThreadCpuUs(): number {
  return statOf(`${process.pid}/task/${process.pid}`)?.cpuUs ?? 0;
}

/** A process started with plain child_process: the baseline a sandboxed start is measured against. */
export interface PlainProcess {
  stdin: NodeJS.WritableStream;
  stdout: NodeJS.ReadableStream;
  exited: Promise<void>;
  /** As a sandbox's kill(): closes stdin, lets the program exit by itself, SIGKILL only if it does not. */
  kill(): Promise<void>;
}

/** Starts `command` with pipes for stdin and stdout, stderr ignored, and nothing of this environment but `env`. */
export function plainProcess(
  command: string,
  args: readonly string[],
  options: { cwd?: string; env?: Record<string, string> } = {},
): PlainProcess {
  const child = spawn(command, args, {
    stdio: ['pipe', 'pipe', 'ignore'],
    env: options.env ?? {},
    cwd: options.cwd,
  });
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  return {
    stdin: child.stdin,
    stdout: child.stdout,
    exited,
    kill: async () => {
      child.stdin.end();
      const timer = setTimeout(() => child.kill('SIGKILL'), 2000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** A V8 profiler run over a session: started before the work, its profile taken after it. */
interface Recorder {
  extension: string;
  start(session: Session): Promise<unknown>;
  stop(session: Session): Promise<object>;
}

const cpuProfile: Recorder = {
  extension: 'cpuprofile',
  start: async (session) => {
    await session.post('Profiler.enable');
    // V8 samples every 1000 µs by default: too coarse for steps of a millisecond (a canvas node).
    const intervalUs = Number(process.env.BENCH_CPU_PROFILE_INTERVAL_US ?? 0);
    if (intervalUs > 0) await session.post('Profiler.setSamplingInterval', { interval: intervalUs });
    await session.post('Profiler.start');
  },
  stop: async (session) => (await session.post('Profiler.stop')).profile,
};

/** Sampled allocations, the collected ones included: what a run allocates, not what it keeps. */
const heapProfile: Recorder = {
  extension: 'heapprofile',
  start: async (session) => {
    await session.post('HeapProfiler.enable');
    await session.post('HeapProfiler.startSampling', {
      samplingInterval: 4096,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true,
    });
  },
  stop: async (session) => (await session.post('HeapProfiler.stopSampling')).profile,
};

/**
 * With BENCH_CPU_PROFILE=<dir>, each measured run against an HTTP target writes a V8 CPU profile of
 * this process to <dir>: where the serving CPU per call goes (BENCH_CPU_PROFILE_INTERVAL_US: a sample
 * every so many µs, V8's 1000 by default). With BENCH_HEAP_PROFILE=<dir>, a
 * sampling heap profile instead: what allocates (each allocation costs the serving process GC time).
 */
export async function profiled<T>(name: string, work: () => Promise<T>): Promise<T> {
  const heapDir = process.env.BENCH_HEAP_PROFILE;
  const cpuDir = process.env.BENCH_CPU_PROFILE;
  if (heapDir !== undefined) return recorded(heapProfile, heapDir, name, work);
  if (cpuDir !== undefined) return recorded(cpuProfile, cpuDir, name, work);
  return work();
}

async function recorded<T>(
  recorder: Recorder,
  dir: string,
  name: string,
  work: () => Promise<T>,
): Promise<T> {
  const session = new Session();
  session.connect();
  await recorder.start(session);
  try {
    return await work();
  } finally {
    const profile = await recorder.stop(session);
    mkdirSync(dir, { recursive: true });
    writeFileSync(
      join(dir, `${name.replace(/[^\w.-]+/g, '_')}.${recorder.extension}`),
      JSON.stringify(profile),
    );
    session.disconnect();
  }
}
