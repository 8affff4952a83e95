import type { Duplex } from 'node:stream';
import { PassThrough } from 'node:stream';
import { constants as osConstants } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import type { SandboxExit, SandboxLimitName, SandboxProcess } from '@sigil/plugin-api';
import type { Engine } from './engine.ts';

/**
 * One running container as the runtime hands it out. Its stdio is the engine's attach connection
 * (hijacked, so stdin and the multiplexed stdout/stderr flow both ways on one socket): stdout and
 * stderr are split out and counted against the output limit; ending `stdin` half-closes the
 * connection, which closes the container's stdin (StdinOnce). `exited` comes from the engine's wait
 * and inspect (OOMKilled, the exit code), once the output has ended and the containers are removed.
 */

export interface ProcessOptions {
  engine: Engine;
  containerId: string;
  attached: Duplex;
  outputBytes: number;
  graceMs: number;
  /** Written on stdin before anything of the caller's (the environment, secretDelivery `stdin`). */
  preamble: string | undefined;
  /** Removes the containers and frees what the sandbox held; never rejects. */
  release: () => Promise<void>;
}

/** Bytes of stderr kept to explain an exit. */
const STDERR_TAIL_BYTES = 4096;
/** How long `exited` waits, after the engine's wait, for the attach connection to deliver the last output. */
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
  private readonly outputEnded: Promise<void>;

  constructor(private readonly options: ProcessOptions) {
    this.containerId = options.containerId;
    this.exited = new Promise((resolve) => (this.resolveExit = resolve));
    const { attached } = options;
    attached.on('error', () => undefined); // the engine's wait says how the container ended
    this.stdin.on('error', () => undefined);
    if (options.preamble) attached.write(options.preamble);
    this.stdin.pipe(attached);
    const split = (target: PassThrough, observe?: (chunk: Buffer) => void) =>
      ({
        write: (chunk: Buffer) => {
          observe?.(chunk);
          this.deliver(target, chunk);
          return true;
        },
      }) as unknown as NodeJS.WritableStream;
    options.engine.streams.modem.demuxStream(
      attached,
      split(this.stdout),
      split(this.stderr, (chunk) => {
        this.stderrTail = (this.stderrTail + chunk.toString('utf8')).slice(-STDERR_TAIL_BYTES);
      }),
    );
    this.outputEnded = new Promise<void>((resolve) => {
      attached.once('close', () => resolve());
      attached.once('end', () => resolve());
    }).then(() => {
      this.stdout.end();
      this.stderr.end();
    });
  }

  /** Starts the container and watches for its end; a start the engine refuses ends it at once with the reason. */
  async start(): Promise<void> {
    const container = this.options.engine.api.getContainer(this.containerId);
    try {
      await container.start();
    } catch (error) {
      const message = (error as { json?: { message?: string } }).json?.message ?? (error as Error).message;
      this.ended = true;
      this.options.attached.destroy();
      void this.finish({ code: null, signal: null, reason: `cannot start the container: ${message}` });
      return;
    }
    void this.watch();
  }

  async kill(): Promise<void> {
    if (this.ended) {
      await this.exited;
      return;
    }
    this.stdin.end();
    const ended = await Promise.race([
      this.exited.then(() => true),
      sleep(this.options.graceMs).then(() => false),
    ]);
    if (!ended)
      this.terminate({ reason: `killed: still running ${this.options.graceMs} ms after stdin closed` });
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
      this.options.attached.destroy();
    }
    this.ended = true;
    await Promise.race([this.outputEnded, sleep(OUTPUT_DRAIN_MS)]);
    this.options.attached.destroy();
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
