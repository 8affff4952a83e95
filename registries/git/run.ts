import { spawn } from 'node:child_process';

/** How a program ended: its exit code (null when a signal ended it) and what it wrote. */
export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** True when the deadline ended it. */
  timedOut: boolean;
}

export interface RunOptions {
  cwd?: string;
  /** The whole environment: nothing of this process's is passed unless given here. */
  env: Record<string, string>;
  timeoutMs: number;
}

/** What is kept of each stream: enough for a ref listing or an error, never unbounded memory. */
const MAX_OUTPUT = 8 * 1024 * 1024;

/**
 * Runs a program without a shell and resolves with how it ended (it never rejects on a non-zero
 * exit: callers decide what a failure means). Hand-written rather than `execFile`: git, npm and pip
 * start helpers of their own (`git-upload-pack`, `git-remote-https`, a build backend), so the deadline
 * must end the whole process group, not only the direct child.
 */
export function run(command: string, args: readonly string[], options: RunOptions): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: options.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const keep = (into: Buffer[]) => {
      let size = 0;
      return (chunk: Buffer) => {
        if (size >= MAX_OUTPUT) return;
        size += chunk.length;
        into.push(chunk);
      };
    };
    child.stdout.on('data', keep(out));
    child.stderr.on('data', keep(err));
    let timedOut = false;
    const group = child.pid;
    if (group !== undefined) running.add(group);
    ensureReaper();
    const timer = setTimeout(() => {
      timedOut = true;
      if (group !== undefined) killGroup(group);
    }, options.timeoutMs);
    const done = () => {
      clearTimeout(timer);
      if (group !== undefined) running.delete(group);
    };
    child.once('error', (error) => {
      done();
      reject(error);
    });
    child.once('close', (code) => {
      done();
      resolve({
        code,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
        timedOut,
      });
    });
  });
}

/** Process groups started by `run` that have not ended yet. */
const running = new Set<number>();
let reaper: (() => void) | undefined;

function killGroup(group: number): void {
  try {
    process.kill(-group, 'SIGKILL');
  } catch {
    // already gone
  }
}

/** A gateway that exits mid-install must not leave a fetch or a build running: one handler for all. */
function ensureReaper(): void {
  if (reaper) return;
  reaper = () => {
    for (const group of running) killGroup(group);
  };
  process.on('exit', reaper);
}

/** The last lines of a program's error output, for a message an operator reads. */
export function tail(text: string, lines = 6): string {
  return text.trim().split('\n').slice(-lines).join('\n');
}
