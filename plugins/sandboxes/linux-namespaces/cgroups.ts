import {
  accessSync,
  chownSync,
  constants,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  writeFileSync,
} from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Per-sandbox cgroups (v1: memory, pids, cpu), for the limits that rlimits cannot give: memory of the
 * whole sandbox rather than per process, and a CPU share that keeps a busy sandbox from starving the
 * host. The runtime creates `<controller>/sigil/<name>` and hands its `cgroup.procs` to the sandbox's
 * user, and the sandbox's setup shell moves itself in before it starts anything, so every process of
 * the sandbox is born inside (no window in which a fork escapes the limit).
 *
 * cgroup v2 is not used: moving a process between v2 cgroups needs write access to their common
 * ancestor, which an unprivileged process cannot be given, so the move would have to happen from
 * outside, racing the sandbox's first fork. On v2 hosts the runtime falls back to rlimits alone.
 */

const CONTROLLERS = ['memory', 'pids', 'cpu'] as const;
type Controller = (typeof CONTROLLERS)[number];

export interface CgroupLimits {
  memoryBytes: number;
  pids: number;
  /** CPUs' worth of time per period the sandbox may use (1 = one full core). */
  cpuQuota: number;
  /** The share (0–1) of one period's quota it may bank and spend above the quota at once. */
  cpuBurst: number;
}

/** The CFS period: quotas and bursts are written in microseconds of it. */
const CPU_PERIOD_US = 100_000;

export class CgroupV1 {
  /** Whether the kernel lets a cgroup bank unused quota (`cpu.cfs_burst_us`, Linux 5.14 on). */
  readonly bursts: boolean;

  private constructor(private readonly base: string) {
    this.bursts = existsSync(join(base, 'cpu', 'cpu.cfs_burst_us'));
  }

  /** The v1 hierarchy when all three controllers are mounted and writable here, else why not. */
  static detect(base = '/sys/fs/cgroup'): CgroupV1 | { unavailable: string } {
    if (existsSync(join(base, 'cgroup.controllers'))) {
      return { unavailable: 'cgroup v2 (unified) hierarchy: per-sandbox cgroups need v1 here' };
    }
    for (const controller of CONTROLLERS) {
      const dir = join(base, controller);
      if (!existsSync(join(dir, 'cgroup.procs')))
        return { unavailable: `no cgroup v1 "${controller}" controller at ${dir}` };
      try {
        accessSync(dir, constants.W_OK);
      } catch {
        return { unavailable: `${dir} is not writable by this process (cgroups need root)` };
      }
    }
    return new CgroupV1(base);
  }

  private dir(controller: Controller, name?: string): string {
    return name === undefined
      ? join(this.base, controller, 'sigil')
      : join(this.base, controller, 'sigil', name);
  }

  create(name: string, limits: CgroupLimits, owner: { uid: number; gid: number }): SandboxCgroup {
    const dirs = CONTROLLERS.map((controller) => {
      const dir = this.dir(controller, name);
      mkdirSync(dir, { recursive: true });
      return dir;
    });
    const [memory, pids, cpu] = dirs as [string, string, string];
    writeFileSync(join(memory, 'memory.limit_in_bytes'), String(limits.memoryBytes));
    // Without a swap limit the sandbox could page its way past the memory limit.
    if (existsSync(join(memory, 'memory.memsw.limit_in_bytes'))) {
      writeFileSync(join(memory, 'memory.memsw.limit_in_bytes'), String(limits.memoryBytes));
    }
    writeFileSync(join(pids, 'pids.max'), String(limits.pids));
    const quotaUs = Math.round(limits.cpuQuota * CPU_PERIOD_US);
    writeFileSync(join(cpu, 'cpu.cfs_period_us'), String(CPU_PERIOD_US));
    writeFileSync(join(cpu, 'cpu.cfs_quota_us'), String(quotaUs));
    // The kernel takes at most the quota.
    if (this.bursts)
      writeFileSync(join(cpu, 'cpu.cfs_burst_us'), String(Math.round(quotaUs * limits.cpuBurst)));
    for (const dir of dirs) chownSync(join(dir, 'cgroup.procs'), owner.uid, owner.gid);
    return new SandboxCgroup(dirs);
  }

  /** Names of the sandbox cgroups present (under any controller), for reaping leftovers. */
  names(): string[] {
    const names = new Set<string>();
    for (const controller of CONTROLLERS) {
      const parent = this.dir(controller);
      if (!existsSync(parent)) continue;
      for (const entry of readdirSync(parent, { withFileTypes: true }))
        if (entry.isDirectory()) names.add(entry.name);
    }
    return [...names];
  }

  /** The cgroup called `name`, existing or not (removing a missing one does nothing). */
  open(name: string): SandboxCgroup {
    return new SandboxCgroup(CONTROLLERS.map((controller) => this.dir(controller, name)));
  }
}

export class SandboxCgroup {
  constructor(private readonly dirs: readonly string[]) {}

  /** The files the setup shell writes `0` to, to move itself in. */
  get procsFiles(): string[] {
    return this.dirs.map((dir) => join(dir, 'cgroup.procs'));
  }

  /**
   * Moves the launcher (`pid`) in from here, off the event loop, while it is still exec'ing. The first
   * cgroup migration after a quiet spell waits for an RCU grace period; paying it here, in parallel
   * with the launch, makes the setup shell's own join (which is what guarantees the limits) cheap.
   * Failures are ignored for the same reason: that join decides.
   */
  prime(pid: number): void {
    for (const file of this.procsFiles) void writeFile(file, String(pid)).catch(() => undefined);
  }

  /** True when the memory controller killed a process of this sandbox. */
  oomKilled(): boolean {
    const control = this.read('memory', 'memory.oom_control');
    return /^oom_kill [1-9]/m.test(control);
  }

  /** True when a fork failed for the pids limit. */
  pidsLimitHit(): boolean {
    return /^max [1-9]/m.test(this.read('pids', 'pids.events'));
  }

  /** Host pids of every process still in the sandbox. */
  pids(): number[] {
    const found = new Set<number>();
    for (const file of this.procsFiles) {
      for (const line of safeRead(file).split('\n')) if (line) found.add(Number(line));
    }
    return [...found];
  }

  /** SIGKILLs whatever is left inside and removes the cgroups once they are empty. */
  async remove(): Promise<void> {
    for (let attempt = 0; attempt < 50; attempt++) {
      for (const pid of this.pids()) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      let busy = false;
      for (const dir of this.dirs) {
        try {
          rmdirSync(dir);
        } catch (error) {
          const code = (error as NodeJS.ErrnoException).code;
          if (code !== 'ENOENT') busy = true;
        }
      }
      if (!busy) return;
      await sleep(20); // dying tasks leave their cgroup a moment after their parent saw them exit
    }
  }

  private read(controller: Controller, file: string): string {
    const dir = this.dirs[CONTROLLERS.indexOf(controller)];
    return dir === undefined ? '' : safeRead(join(dir, file));
  }
}

function safeRead(file: string): string {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}
