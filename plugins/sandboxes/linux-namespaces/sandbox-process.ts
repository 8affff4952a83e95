import type { ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { constants as osConstants } from 'node:os';
import { Transform, type Readable, type TransformCallback } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SandboxExit, SandboxLimitName, SandboxProcess } from '@sigil/plugin-api';
import { killAfterGrace } from '@sigil/plugin-api/sandbox';
import type { SandboxCgroup } from './cgroups.ts';
import { SETUP_FAILED_EXIT, SETUP_FAILED_PREFIX } from './launch.ts';
import { markedProcesses } from './leftovers.ts';

/**
 * One running sandbox as the runtime hands it out: its stdio (output metered against the output
 * limit), its end (which limit, if any, ended it, and why), and kill().
 */

export interface SandboxOptions {
  id: string;
  marker: string;
  outputBytes: number;
  graceMs: number;
  cgroup: SandboxCgroup | undefined;
  /** True when memory is an RLIMIT_DATA per process (an allocation fails) rather than a cgroup (a kill). */
  memoryPerProcess: boolean;
  release: () => Promise<void>;
}

/** Bytes of stderr kept to explain an exit (setup failures, out-of-memory aborts). */
const STDERR_TAIL_BYTES = 4096;

export class LinuxSandboxProcess implements SandboxProcess {
  readonly stdin: NodeJS.WritableStream;
  readonly stdout: Readable;
  readonly stderr: Readable;
  readonly exited: Promise<SandboxExit>;
  /** Host pid of the outermost process of the chain (`setpriv`, then `unshare`). */
  readonly pid: number | undefined;
  readonly id: string;
  readonly marker: string;
  private ended = false;
  private pidNamespace: string | undefined;
  private killedFor: { limit?: SandboxLimitName; reason: string } | undefined;
  private stderrTail = '';

  constructor(
    private readonly child: ChildProcess,
    private readonly options: SandboxOptions,
  ) {
    this.id = options.id;
    this.marker = options.marker;
    this.pid = child.pid;
    this.stdin = child.stdin as NodeJS.WritableStream;
    this.stdin.on('error', () => undefined); // writes to a dead sandbox: `exited` reports its end
    let written = 0;
    const meter = (chunk: Buffer): boolean => {
      written += chunk.length;
      if (written <= options.outputBytes) return true;
      this.terminate({ limit: 'output', reason: `stdout and stderr exceeded ${options.outputBytes} bytes` });
      return false;
    };
    this.stdout = (child.stdout as Readable).pipe(new OutputGate(meter));
    this.stderr = (child.stderr as Readable).pipe(
      new OutputGate(meter, (chunk) => {
        this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
      }),
    );
    this.exited = new Promise<SandboxExit>((resolve) => {
      child.once('error', (error) => {
        // The launcher itself could not be executed: nothing ran.
        if (child.pid !== undefined) return;
        this.ended = true;
        void options
          .release()
          .finally(() =>
            resolve({ code: null, signal: null, reason: `cannot start the sandbox: ${error.message}` }),
          );
      });
      child.once('close', (code, signal) => {
        void this.finish(code, signal).then(resolve);
      });
    });
  }

  /** Whether the chain still runs: nothing ended or killed it, from here or outside (not reaped yet). */
  get alive(): boolean {
    if (this.ended || this.killedFor || this.child.exitCode !== null || this.child.signalCode !== null)
      return false;
    const stat = readStat(this.pid);
    // The state follows the command name, which may hold spaces or parentheses: after the last ')'.
    return stat !== undefined && !/^ [ZX]/.test(stat.slice(stat.lastIndexOf(')') + 1));
  }

  async kill(): Promise<void> {
    if (!this.ended) await killAfterGrace(this, this.options.graceMs, (why) => this.terminate(why));
    await this.exited;
  }

  /** Kills every process of the sandbox now. */
  terminate(why: { limit?: SandboxLimitName; reason: string }): void {
    if (this.ended) return;
    this.killedFor ??= why;
    const pid = this.child.pid;
    if (pid === undefined) return;
    // Which PID namespace to watch empty out: `unshare` made it, and is alive until the kill below.
    this.pidNamespace = readLink(`/proc/${pid}/ns/pid_for_children`);
    // The group holds the whole chain unless a process left it; the pdeath signal and PID namespace
    // take care of those: unshare's death kills the namespace's init, and with it everything inside.
    for (const target of [-pid, pid]) {
      try {
        process.kill(target, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }

  private async finish(code: number | null, signal: NodeJS.Signals | null): Promise<SandboxExit> {
    this.ended = true;
    const left = signal === null ? undefined : this.processesLeft();
    if (left) await waitUntilGone(left, NAMESPACE_WAIT_MS, NAMESPACE_POLL_MS);
    const exit = this.describe(code, signal);
    if (left?.()) {
      // A process outlived the wait (stuck in the kernel, say) and still runs as the sandbox's uid:
      // the uid (and the proxy and cgroup) stay held until it is gone, so no new sandbox gets it.
      void waitUntilGone(left, Infinity, SURVIVOR_POLL_MS).then(() => this.options.release());
    } else {
      await this.options.release();
    }
    return exit;
  }

  /**
   * Whether a process of this sandbox is left: its init's death takes the namespace down, but the
   * others die a moment later. Watched by PID namespace when the kill came from here, otherwise by
   * the marker of its init.
   */
  private processesLeft(): () => boolean {
    const ns = this.pidNamespace;
    return ns === undefined || ns === readLink('/proc/self/ns/pid')
      ? () => markedProcesses().some((p) => p.id === this.id)
      : () =>
          readdirSync('/proc').some(
            (entry) => /^\d+$/.test(entry) && readLink(`/proc/${entry}/ns/pid`) === ns,
          );
  }

  private describe(code: number | null, signal: NodeJS.Signals | null): SandboxExit {
    // A process of the sandbox that died of signal N shows as 128 + N from its init.
    const bySignal = code !== null && code > 128 && code < 128 + 65 ? signalName(code - 128) : null;
    const exit: SandboxExit = { code, signal: signal ?? bySignal };
    const limit = this.killedFor?.limit ?? this.limitFrom(code, exit.signal);
    if (limit) exit.limit = limit;
    const setup = this.stderrTail.split('\n').find((line) => line.startsWith(SETUP_FAILED_PREFIX));
    if (this.killedFor) exit.reason = this.killedFor.reason;
    else if (code === SETUP_FAILED_EXIT && setup) exit.reason = setup.trim();
    else if (limit) exit.reason = LIMIT_REASONS[limit];
    return exit;
  }

  private limitFrom(code: number | null, signal: NodeJS.Signals | null): SandboxLimitName | undefined {
    if (signal === 'SIGXCPU') return 'cpu';
    if (signal === 'SIGXFSZ') return 'file-size';
    if (this.options.cgroup?.oomKilled()) return 'memory';
    if (
      code !== 0 &&
      this.options.memoryPerProcess &&
      /out of memory|allocation failed/i.test(this.stderrTail)
    ) {
      return 'memory';
    }
    if (code !== 0 && this.options.cgroup?.pidsLimitHit()) return 'pids';
    return undefined;
  }
}

const LIMIT_REASONS: Record<SandboxLimitName, string> = {
  memory: 'ended for exceeding its memory limit',
  cpu: 'ended for exceeding its CPU time limit',
  pids: 'ended after reaching its process limit',
  output: 'killed for exceeding its output limit',
  'file-size': 'ended for writing a file larger than its limit',
};

/** How long `exited` waits for a killed sandbox's processes to be gone, and how often it looks. */
const NAMESPACE_WAIT_MS = 2_000;
const NAMESPACE_POLL_MS = 10;
/** How often a process that outlived that wait is looked for again. */
const SURVIVOR_POLL_MS = 1_000;

/** Resolves once `left()` is false, or after about `forMs`; an endless watch keeps no process alive. */
async function waitUntilGone(left: () => boolean, forMs: number, everyMs: number): Promise<void> {
  for (let waited = 0; waited < forMs && left(); waited += everyMs)
    await sleep(everyMs, undefined, { ref: Number.isFinite(forMs) });
}

function readStat(pid: number | undefined): string | undefined {
  try {
    return pid === undefined ? undefined : readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return undefined;
  }
}

function readLink(path: string): string | undefined {
  try {
    return readlinkSync(path);
  } catch {
    return undefined;
  }
}

function signalName(number: number): NodeJS.Signals | null {
  const entry = Object.entries(osConstants.signals).find(([, value]) => value === number);
  return entry ? (entry[0] as NodeJS.Signals) : null;
}

/** Passes chunks through while `allow` says so; after that the output is cut off (dropped). */
class OutputGate extends Transform {
  private open = true;
  constructor(
    private readonly allow: (chunk: Buffer) => boolean,
    private readonly observe?: (chunk: Buffer) => void,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.observe?.(chunk);
    if (this.open && this.allow(chunk)) callback(null, chunk);
    else {
      this.open = false;
      callback();
    }
  }
}
