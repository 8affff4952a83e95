import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { createRequire } from 'node:module';
import type { Logger } from '../core/log.ts';
import { prepareStateFile } from './state-file.ts';

/** The mnemonic of anvil's well-known dev accounts, passed explicitly so our derivation always matches. */
export const DEV_MNEMONIC = 'test test test test test test test test test test test junk';

/** Anvil only ever listens on loopback: the dev chain is never reachable from the network. */
const LOOPBACK = '127.0.0.1';

export interface AnvilOptions {
  /** Port to listen on; 0 or absent lets the kernel pick a free one (no race with other processes). */
  port?: number;
  /** Chain id; 8453, Base's, by default, so payment requirements read as they will in production. */
  chainId?: number;
  /** Path of the anvil binary; by default the one of the `@foundry-rs/anvil` npm package. */
  binaryPath?: string;
  /** How long anvil may take to answer RPC before start-up fails. */
  startTimeoutMs?: number;
  /**
   * Where the chain's state persists (anvil `--state`): loaded at start when the file holds a state,
   * written every `STATE_INTERVAL_SECONDS` and on a graceful stop. Without it, each start is a fresh chain.
   */
  statePath?: string;
  logger: Logger;
}

export interface AnvilProcess {
  readonly rpcUrl: string;
  readonly port: number;
  readonly chainId: number;
  /** Pid of anvil itself (the launch chain execs into it). */
  readonly pid: number;
  /** Settles when anvil has exited, for whatever reason. */
  readonly exited: Promise<void>;
  /** SIGTERM (anvil writes its state file, if it has one), then SIGKILL if it lingers; resolves once anvil is gone. Idempotent. */
  stop(): Promise<void>;
}

const DEFAULT_CHAIN_ID = 8453;
const DEFAULT_START_TIMEOUT_MS = 15_000;
/** Long enough for anvil to write its state on SIGTERM (a dev chain's state is a few MB at most). */
const STOP_GRACE_MS = 10_000;
/** How often a persisted chain writes its state: what a SIGKILL (of anvil or of Sigil) can lose. */
export const STATE_INTERVAL_SECONDS = 2;
/** Enough of anvil's output to explain a failed start; the rest is discarded. */
const OUTPUT_TAIL_BYTES = 4_096;
/** Exit code of the launch guard when anvil's parent was already gone (see `launchCommand`). */
const ORPHANED_AT_LAUNCH = 97;

/**
 * Starts anvil and resolves once it answers JSON-RPC with the expected chain id.
 *
 * Anvil must not outlive this process, even a SIGKILLed one: on Linux it is launched through
 * util-linux `setpriv --pdeathsig SIGKILL`, so the kernel kills it when its parent dies (as the
 * sandbox runtime does for tool servers). Without setpriv (not Linux) it is killed on a normal exit only.
 */
export async function startAnvil(options: AnvilOptions): Promise<AnvilProcess> {
  const chainId = options.chainId ?? DEFAULT_CHAIN_ID;
  const binary = options.binaryPath ?? anvilBinaryPath();
  const args = [
    '--host',
    LOOPBACK,
    '--port',
    String(options.port ?? 0),
    '--chain-id',
    String(chainId),
    '--mnemonic',
    DEV_MNEMONIC,
    // Never --quiet: the "Listening on host:port" line is how a kernel-picked port is learned.
    '--color',
    'never',
    ...(options.statePath === undefined
      ? []
      : [
          '--state',
          prepareStateFile(options.statePath, options.logger),
          '--state-interval',
          String(STATE_INTERVAL_SECONDS),
        ]),
  ];
  const launch = launchCommand(binary, args);
  if (!launch.diesWithParent) {
    options.logger.warn('dev chain: setpriv not found; anvil may outlive this process if it is killed');
  }
  const child = spawn(launch.command, launch.args, {
    stdio: ['ignore', 'pipe', 'pipe'],
    // Nothing of ours (config secrets, keys) in its environment; PATH and HOME are all it uses.
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      ...(process.env.HOME ? { HOME: process.env.HOME } : {}),
    },
    // Its own session: Ctrl-C in the terminal reaches Sigil only, which stops anvil after the
    // services have drained, instead of anvil vanishing under in-flight settlements.
    detached: true,
  });
  const anvil = new RunningAnvil(child, chainId, options.logger, launch.diesWithParent);
  try {
    await anvil.ready(options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS);
  } catch (error) {
    await anvil.stop();
    throw error;
  }
  return anvil;
}

/** The anvil binary shipped by the `@foundry-rs/<tool>-<os>-<arch>` package for this platform. */
export function anvilBinaryPath(): string {
  const npmArch: Record<string, string> = { x64: 'amd64', arm64: 'arm64' };
  const arch = npmArch[process.arch];
  const binaryName = process.platform === 'win32' ? 'anvil.exe' : 'anvil';
  const platformPackage = `@foundry-rs/anvil-${process.platform}-${arch ?? process.arch}`;
  // The platform's binary package directly (an optional dependency: npm installs the one for this
  // platform): the wrapper's bin script would put a node process between us and anvil.
  const require = createRequire(import.meta.url);
  try {
    return require.resolve(`${platformPackage}/bin/${binaryName}`);
  } catch {
    throw new Error(
      `anvil binary not found: the npm package ${platformPackage} is not installed (package.json lists anvil for Linux x64; add this platform's @foundry-rs/anvil-* package)`,
    );
  }
}

const TOOL_DIRS = ['/usr/bin', '/bin', '/usr/sbin', '/sbin', '/usr/local/bin'];

function findExecutable(name: string): string | undefined {
  for (const dir of TOOL_DIRS) {
    try {
      accessSync(`${dir}/${name}`, constants.X_OK);
      return `${dir}/${name}`;
    } catch {
      // not here
    }
  }
  return undefined;
}

/**
 * setpriv arms PR_SET_PDEATHSIG and execs a shell that execs anvil (the signal survives exec). The
 * shell first checks that its parent is still this process: if we died between fork and prctl, the
 * signal would never come, and anvil, reparented, must not start at all.
 * PDEATHSIG fires when the spawning *thread* ends: call this from the main thread, not a worker.
 */
function launchCommand(
  binary: string,
  args: string[],
): { command: string; args: string[]; diesWithParent: boolean } {
  const setpriv = process.platform === 'linux' ? findExecutable('setpriv') : undefined;
  const sh = findExecutable('sh');
  if (setpriv === undefined || sh === undefined) return { command: binary, args, diesWithParent: false };
  const guard = `[ "$PPID" = "$0" ] || exit ${ORPHANED_AT_LAUNCH}; exec "$@"`;
  return {
    command: setpriv,
    args: ['--pdeathsig', 'SIGKILL', '--', sh, '-c', guard, String(process.pid), binary, ...args],
    diesWithParent: true,
  };
}

class RunningAnvil implements AnvilProcess {
  readonly pid: number;
  readonly exited: Promise<void>;
  rpcUrl = '';
  port = 0;
  private outputTail = '';
  private exitDescription: string | undefined;
  private stopping: Promise<void> | undefined;
  /** Set once it answered: an exit before that is a start-up failure, reported as such. */
  private started = false;
  private readonly killOnExit = () => this.child.kill('SIGKILL');

  constructor(
    private readonly child: ChildProcess,
    readonly chainId: number,
    private readonly logger: Logger,
    diesWithParent: boolean,
  ) {
    this.pid = child.pid ?? -1;
    this.exited = new Promise((resolve) => {
      child.once('exit', (code, signal) => {
        this.exitDescription =
          code === ORPHANED_AT_LAUNCH
            ? 'its parent process ended before it started'
            : `exit ${signal ?? code ?? 'unknown'}`;
        if (this.started && !this.stopping)
          this.logger.warn({ pid: this.pid, exit: this.exitDescription }, 'dev chain: anvil exited');
        process.off('exit', this.killOnExit);
        resolve();
      });
      // spawn(2) itself failed (e.g. ENOENT): there is no process, and no 'exit' event follows.
      child.once('error', (error) => {
        this.exitDescription ??= `cannot start: ${error.message}`;
        process.off('exit', this.killOnExit);
        resolve();
      });
    });
    if (!diesWithParent) process.once('exit', this.killOnExit);
    child.stderr?.on('data', (chunk: Buffer) => this.keepTail(chunk));
  }

  /** Waits for "Listening on host:port" on stdout, then for RPC to answer with our chain id. */
  async ready(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const stdout = this.child.stdout;
    if (!stdout) throw new Error('anvil has no stdout');
    const listening = await new Promise<{ host: string; port: number } | undefined>((resolve) => {
      const timer = setTimeout(() => finish(undefined), timeoutMs);
      const onData = (chunk: Buffer) => {
        this.keepTail(chunk);
        const match = /Listening on ([0-9.]+):(\d+)/.exec(this.outputTail);
        if (match) finish({ host: match[1] ?? LOOPBACK, port: Number(match[2]) });
      };
      const finish = (result: { host: string; port: number } | undefined) => {
        clearTimeout(timer);
        stdout.off('data', onData);
        // Keep draining (anvil logs every RPC call when not --quiet): a full pipe would stall it.
        stdout.resume();
        resolve(result);
      };
      stdout.on('data', onData);
      void this.exited.then(() => finish(undefined));
    });
    if (!listening) {
      throw this.startError(
        this.exitDescription === undefined
          ? `did not report its RPC address within ${timeoutMs} ms`
          : 'ended before it listened',
      );
    }
    if (listening.host !== LOOPBACK) throw this.startError(`listens on ${listening.host}, not on loopback`);
    this.port = listening.port;
    this.rpcUrl = `http://${LOOPBACK}:${listening.port}`;
    while (this.exitDescription === undefined) {
      const answered = await chainIdAt(this.rpcUrl);
      if (answered === this.chainId) {
        this.started = true;
        return;
      }
      if (answered !== undefined)
        throw this.startError(`answers with chain id ${answered}, not ${this.chainId}`);
      if (Date.now() > deadline) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    throw this.startError(`did not answer JSON-RPC at ${this.rpcUrl} within ${timeoutMs} ms`);
  }

  stop(): Promise<void> {
    this.stopping ??= this.terminate();
    return this.stopping;
  }

  private async terminate(): Promise<void> {
    if (this.exitDescription !== undefined || this.child.pid === undefined) return this.exited;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), STOP_GRACE_MS);
    await this.exited;
    clearTimeout(timer);
  }

  private keepTail(chunk: Buffer): void {
    this.outputTail = (this.outputTail + chunk.toString('utf8')).slice(-OUTPUT_TAIL_BYTES);
  }

  private startError(reason: string): Error {
    const exit = this.exitDescription === undefined ? '' : ` (${this.exitDescription})`;
    const output = this.outputTail.trim();
    return new Error(`anvil ${reason}${exit}${output ? `\n${output}` : ''}`);
  }
}

/** The chain id anvil answers with, or undefined while it does not answer yet. */
async function chainIdAt(rpcUrl: string): Promise<number | undefined> {
  try {
    const response = await fetch(rpcUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'eth_chainId', params: [] }),
      signal: AbortSignal.timeout(1_000),
    });
    const body = (await response.json()) as { result?: unknown };
    return typeof body.result === 'string' ? Number(BigInt(body.result)) : undefined;
  } catch {
    return undefined;
  }
}
