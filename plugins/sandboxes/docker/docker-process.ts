import { PassThrough } from 'node:stream';
import { constants as osConstants } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SandboxExit, SandboxLimitName, SandboxProcess } from '@sigil/plugin-api';
import { killAfterGrace } from '@sigil/plugin-api/sandbox';
import type { Engine } from './engine.ts';
import type { ContainerStdio } from './stdio.ts';

/**
 * One running container as the runtime hands it out: its stdio (stdio.ts), stdout and stderr
 * counted against the output limit; its end, from the engine's wait and inspect (OOMKilled, the exit
 * code), once the output has ended and the containers are removed; and kill().
 */

export interface ProcessOptions {
  engine: Engine;
  containerId: string;
  stdio: ContainerStdio;
  outputBytes: number;
  graceMs: number;
  /** Written on stdin before anything of the caller's (the environment, secretDelivery `stdin`). */
  preamble: string | undefined;
  /** Removes the containers and frees what the sandbox held; never rejects. */
  release: () => Promise<void>;
}

/** Bytes of stderr kept to explain an exit. */
const STDERR_TAIL_BYTES = 4096;
/** How long `exited` waits, after the engine's wait, for the last output to be read. */
const OUTPUT_DRAIN_MS = 2_000;

export class DockerSandboxProcess implements SandboxProcess {
  readonly stdin = new PassThrough();
  readonly stdout = new PassThrough();
  readonly stderr = new PassThrough();
  readonly exited: Promise<SandboxExit>;
  readonly containerId: string;
  private resolveExit!: (exit: SandboxExit) => void;
  private ended = false;
  private killedFor: { limit?: SandboxLimitName; reason: string } | undefined;
  private written = 0;
  private stderrTail = '';

  constructor(private readonly options: ProcessOptions) {
    this.containerId = options.containerId;
    this.exited = new Promise((resolve) => (this.resolveExit = resolve));
    const { stdio } = options;
    this.stdin.on('error', () => undefined);
    if (options.preamble) stdio.input.write(options.preamble);
    this.stdin.pipe(stdio.input);
    stdio.wire(
      (chunk) => this.deliver(this.stdout, chunk),
      (chunk) => {
        this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
        this.deliver(this.stderr, chunk);
      },
    );
  }

  /** Starts the container and watches for its end; a start the engine refuses ends it at once with the reason. */
  async start(): Promise<void> {
    const container = this.options.engine.api.getContainer(this.containerId);
    try {
      await container.start();
    } catch (error) {
      const message = (error as { json?: { message?: string } }).json?.message ?? (error as Error).message;
      this.ended = true;
      this.options.stdio.destroy();
      void this.finish({ code: null, signal: null, reason: `cannot start the container: ${message}` });
      return;
    }
    void this.watch();
  }

  async kill(): Promise<void> {
    if (!this.ended) await killAfterGrace(this, this.options.graceMs, (why) => this.terminate(why));
    await this.exited;
  }

  /** Kills the container now (its init, and with it everything inside). */
  terminate(why: { limit?: SandboxLimitName; reason: string }): void {
    if (this.ended) return;
    this.killedFor ??= why;
    this.options.engine.api
      .getContainer(this.containerId)
      .kill({ signal: 'SIGKILL' })
      .catch(() => undefined); // not running any more: the wait reports its end
  }

  private deliver(target: PassThrough, chunk: Buffer): void {
    if (this.killedFor?.limit === 'output') return;
    this.written += chunk.length;
    if (this.written > this.options.outputBytes) {
      this.terminate({
        limit: 'output',
        reason: `stdout and stderr exceeded ${this.options.outputBytes} bytes`,
      });
      return;
    }
    target.write(chunk);
  }

  private async watch(): Promise<void> {
    const { engine, containerId } = this.options;
    let exit: SandboxExit;
    try {
      const waited = (await engine.streams.getContainer(containerId).wait()) as {
        StatusCode: number;
        Error?: { Message?: string } | null;
      };
      const state = (await engine.api.getContainer(containerId).inspect()).State;
      exit = this.describe(waited.StatusCode, state.OOMKilled, waited.Error?.Message);
    } catch (error) {
      // The engine went away under it: the container's fate is the engine's (or the reaper's).
      exit = { code: null, signal: null, reason: engine.failure('waiting for the container', error).message };
      this.options.stdio.destroy();
    }
    this.ended = true;
    this.options.stdio.exited();
    await Promise.race([this.options.stdio.outputEnded, sleep(OUTPUT_DRAIN_MS)]);
    this.options.stdio.destroy();
    await this.finish(exit);
  }

  private async finish(exit: SandboxExit): Promise<void> {
    this.stdout.end();
    this.stderr.end();
    await this.options.release();
    this.resolveExit(exit);
  }

  private describe(code: number, oomKilled: boolean, waitError: string | undefined): SandboxExit {
    // A container's init killed by signal N, or passing on such a death of the server, exits 128 + N.
    const signal = code > 128 && code < 128 + 65 ? signalName(code - 128) : null;
    const exit: SandboxExit = { code, signal };
    const limit =
      this.killedFor?.limit ??
      (oomKilled ? 'memory' : signal === 'SIGXCPU' ? 'cpu' : signal === 'SIGXFSZ' ? 'file-size' : undefined);
    if (limit) exit.limit = limit;
    const wrapperFailed = code === 125 ? this.stderrTail.trim().split('\n').pop() : undefined;
    const reason =
      this.killedFor?.reason ??
      (limit ? LIMIT_REASONS[limit] : undefined) ??
      waitError ??
      (wrapperFailed ? `the environment could not be set: ${wrapperFailed}` : undefined);
    if (reason) exit.reason = reason;
    return exit;
  }
}

const LIMIT_REASONS: Record<SandboxLimitName, string> = {
  memory: 'ended for exceeding its memory limit',
  cpu: 'ended for exceeding its CPU time limit',
  pids: 'ended after reaching its process limit',
  output: 'killed for exceeding its output limit',
  'file-size': 'ended for writing a file larger than its limit',
};

function signalName(number: number): NodeJS.Signals | null {
  const entry = Object.entries(osConstants.signals).find(([, value]) => value === number);
  return entry ? (entry[0] as NodeJS.Signals) : null;
}
