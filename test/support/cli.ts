import type { Address } from 'viem';
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { repoPath } from './paths.ts';

export const SIGIL_BIN = repoPath('bin', 'sigil.js');

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** How to run `sigil`: `bin` another copy of bin/sigil.js (a build's), `nodeArgs` before it. */
interface SigilOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  bin?: string;
  nodeArgs?: readonly string[];
}

const sigilArgv = (args: readonly string[], options: SigilOptions) => [
  ...(options.nodeArgs ?? []),
  options.bin ?? SIGIL_BIN,
  ...args,
];

/** Runs the real `sigil` command to completion. */
export function runSigil(args: readonly string[], options: SigilOptions = {}): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, sigilArgv(args, options), {
      cwd: options.cwd ?? process.cwd(),
      env: { ...process.env, LOG_LEVEL: 'warn', ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** Starts a long-running `sigil` command and resolves once its stdout matches `ready`. */
export function startSigil(
  args: readonly string[],
  ready: RegExp,
  options: SigilOptions & { timeoutMs?: number } = {},
): Promise<{ child: ChildProcess; output: () => string; exited: Promise<number | null> }> {
  const child = spawn(process.execPath, sigilArgv(args, options), {
    cwd: options.cwd ?? process.cwd(),
    env: { ...process.env, LOG_LEVEL: 'warn', ...options.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`sigil ${args.join(' ')} not ready in time:\n${output}`));
    }, options.timeoutMs ?? 30_000);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (ready.test(output)) {
        clearTimeout(timer);
        resolve({ child, output: () => output, exited });
      }
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`sigil ${args.join(' ')} exited with ${code}:\n${output}`));
    });
  });
}

/**
 * A port that was free a moment ago, for a child process to listen on (with `consecutive`, the first
 * of that many free in a row). Taken below the kernel's ephemeral range, from a random start: a port
 * the OS picked (listen on 0) is in that range, and once released the next outgoing connection of any
 * process may take it as its local port before the child listens (EADDRINUSE, seen in CI). Ports
 * below the range are never picked by the OS.
 */
export async function freePort(consecutive = 1): Promise<number> {
  const [lowestEphemeral] = ephemeralRange();
  const floor = 10_000;
  const span = Math.max(1, lowestEphemeral - floor - (consecutive - 1));
  const start = floor + Math.floor(Math.random() * span);
  for (let i = 0; i < span; i++) {
    const port = floor + ((start - floor + i) % span);
    if (await allListen(port, consecutive)) return port;
  }
  throw new Error(`no ${consecutive} free ports in a row between ${floor} and ${lowestEphemeral}`);
}

async function allListen(first: number, count: number): Promise<boolean> {
  for (let port = first; port < first + count; port++) if (!(await canListen(port))) return false;
  return true;
}

function ephemeralRange(): [number, number] {
  try {
    const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')
      .trim()
      .split(/\s+/)
      .map(Number);
    if (low && high) return [low, high];
  } catch {
    // Not Linux: the IANA dynamic range.
  }
  return [49_152, 65_535];
}

function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** The end of the dev chain block `sigil up` prints. */
export const BANNER_END = /never for real funds/;

/** The dev chain block of `sigil up`'s stdout, parsed. */
export function parseBanner(output: string) {
  const field = (pattern: RegExp) => {
    const match = pattern.exec(output);
    if (!match?.[1]) throw new Error(`${pattern} not in:\n${output}`);
    return match[1];
  };
  return {
    rpcUrl: field(/^dev chain\s+(http:\/\/127\.0\.0\.1:\d+)/m),
    chainId: Number(field(/^dev chain .*\(chain id (\d+)/m)),
    token: field(/^\s+token\s+(0x[0-9a-fA-F]{40})/m) as Address,
    treasury: field(/^\s+treasury\s+(0x[0-9a-fA-F]{40})/m) as Address,
    payer: field(/^\s+payer\s+(0x[0-9a-fA-F]{40})/m) as Address,
    key: field(/^\s+key\s+(0x[0-9a-f]{64})/m),
  };
}
