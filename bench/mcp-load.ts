/**
 * Load generator for MCP `tools/call`, run as its own process so its CPU never counts as the server's.
 * One JSON argument says what to call:
 *
 * - `{ "kind": "http", url, body, headers, expect }`: POSTs `body` (a JSON-RPC request) over keep-alive
 *   `node:http` connections (fetch costs several times the server's CPU per request here); every answer
 *   must be a 200 whose body holds `expect` and no `"isError":true`.
 * - `{ "kind": "stdio", packagePath, entry, args, sandboxStateDir?, tool, arguments, expect }`: starts
 *   the server itself (in a linux-namespaces sandbox of its own when `sandboxStateDir` is set, else as a
 *   plain child) and calls it through the SDK `Client` over stdio: the direct path, no gateway. It also
 *   reports the server's CPU over the measured calls, from /proc.
 *
 * Keeps `concurrency` calls in flight, first `warmup` unmeasured calls, then `total` measured ones, and
 * prints `{ requests, seconds, rps, p50, p99, mcpServerCpuUs? }` (milliseconds) as JSON. With `versus`
 * (another HTTP target, one call in flight) the two are called in turn and `versus` gets figures of its
 * own (see LoadOptions).
 */
import { spawn } from 'node:child_process';
import { Agent, request } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { pino } from 'pino';
import { ProcessStdioTransport, type ProcessStdio } from '../core/mcp/process-transport.ts';
import { configSchema, LinuxNamespacesRuntime } from '../plugins/sandboxes/linux-namespaces/index.ts';
import { cpuBetween, descendants } from './proc.ts';

interface HttpTarget {
  kind: 'http';
  url: string;
  body: string;
  headers: Record<string, string>;
  expect: string;
}

interface StdioTarget {
  kind: 'stdio';
  packagePath: string;
  entry: string;
  args: string[];
  sandboxStateDir?: string;
  tool: string;
  arguments: Record<string, unknown>;
  expect: string;
}

export interface LoadOptions {
  target: HttpTarget | StdioTarget;
  /**
   * An HTTP target called in turn with `target` (HTTP too), one call in flight: every pair of calls
   * has one of each, `target`'s first every other pair, so both meet the same moments of the machine,
   * whose drift from one run to the next is larger than a few µs per call. `total` and `warmup` count
   * pairs; each target's rps is its calls over the time they took.
   */
  versus?: HttpTarget;
  total: number;
  concurrency: number;
  warmup: number;
}

export interface LoadResult {
  requests: number;
  seconds: number;
  rps: number;
  p50: number;
  p99: number;
  /** The MCP server's CPU over the measured calls (stdio targets only), in µs. */
  mcpServerCpuUs?: number;
  /** With `versus`: its calls' figures. */
  versus?: Figures;
}

type Figures = Pick<LoadResult, 'requests' | 'seconds' | 'rps' | 'p50' | 'p99'>;

type Call = () => Promise<void>;

function httpCaller(target: HttpTarget, concurrency: number): { call: Call; close(): void } {
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  const body = Buffer.from(target.body);
  const headers = { ...target.headers, 'content-type': 'application/json', 'content-length': body.length };
  const call: Call = () =>
    new Promise((resolve, reject) => {
      const req = request(target.url, { method: 'POST', agent, headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          if (res.statusCode === 200 && text.includes(target.expect) && !text.includes('"isError":true'))
            resolve();
          else reject(new Error(`unexpected answer (${res.statusCode}): ${text.slice(0, 500)}`));
        });
      });
      req.on('error', reject);
      req.end(body);
    });
  return { call, close: () => agent.destroy() };
}

async function stdioCaller(target: StdioTarget): Promise<{ call: Call; close(): Promise<void> }> {
  let stdio: ProcessStdio;
  let stop: () => Promise<void>;
  if (target.sandboxStateDir) {
    const runtime = new LinuxNamespacesRuntime({
      config: configSchema.parse({ stateDir: target.sandboxStateDir }),
      logger: pino({ level: 'silent' }),
    });
    await runtime.start();
    stdio = await runtime.spawn({
      launch: {
        kind: 'host',
        runtime: 'node',
        root: target.packagePath,
        args: [target.entry, ...target.args],
      },
      env: {},
      networkAllowList: [],
    });
    stop = () => runtime.stop();
  } else {
    const child = spawn(process.execPath, [target.entry, ...target.args], {
      stdio: ['pipe', 'pipe', 'pipe'],
      env: {},
    });
    const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
    stdio = { stdin: child.stdin, stdout: child.stdout, stderr: child.stderr, exited };
    stop = async () => {
      child.stdin.end();
      await exited;
    };
  }
  const client = new Client({ name: 'bench-direct', version: '1.0.0' });
  await client.connect(new ProcessStdioTransport(stdio, { maxMessageBytes: 16 * 1024 * 1024 }));
  const call: Call = async () => {
    const result = (await client.callTool({
      name: target.tool,
      arguments: target.arguments,
    })) as CallToolResult;
    if (result.isError || !JSON.stringify(result.content).includes(target.expect))
      throw new Error(`unexpected result: ${JSON.stringify(result).slice(0, 500)}`);
  };
  return {
    call,
    close: async () => {
      await client.close();
      await stop();
    },
  };
}

/** The call's latency in milliseconds. */
async function timed(call: Call): Promise<number> {
  const started = process.hrtime.bigint();
  await call();
  return Number(process.hrtime.bigint() - started) / 1e6;
}

async function run(call: Call, count: number, concurrency: number): Promise<number[]> {
  const latencies: number[] = [];
  let next = 0;
  const worker = async () => {
    while (next < count) {
      next += 1;
      latencies.push(await timed(call));
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return latencies;
}

/** `pairs` pairs of calls, one of each, the first's first every other pair: each one's latencies. */
async function interleaved(first: Call, second: Call, pairs: number): Promise<[number[], number[]]> {
  const latencies: [number[], number[]] = [[], []];
  for (let pair = 0; pair < pairs; pair += 1) {
    const order = pair % 2 === 0 ? ([0, 1] as const) : ([1, 0] as const);
    for (const which of order) latencies[which].push(await timed(which === 0 ? first : second));
  }
  return latencies;
}

/** Figures of calls that took `seconds` in all. */
function figures(latencies: number[], seconds: number): Figures {
  const sorted = [...latencies].sort((a, b) => a - b);
  const pick = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
  return { requests: sorted.length, seconds, rps: sorted.length / seconds, p50: pick(0.5), p99: pick(0.99) };
}

const options = JSON.parse(process.argv[2] ?? '{}') as LoadOptions;
let result: LoadResult;
if (options.versus) {
  if (options.target.kind !== 'http' || options.concurrency !== 1)
    throw new Error('versus: two HTTP targets, one call in flight');
  const mine = httpCaller(options.target, 1);
  const theirs = httpCaller(options.versus, 1);
  await interleaved(mine.call, theirs.call, options.warmup);
  const [own, other] = await interleaved(mine.call, theirs.call, options.total);
  mine.close();
  theirs.close();
  const took = (latencies: number[]) => latencies.reduce((sum, ms) => sum + ms, 0) / 1000;
  result = { ...figures(own, took(own)), versus: figures(other, took(other)) };
} else {
  const caller =
    options.target.kind === 'http'
      ? httpCaller(options.target, options.concurrency)
      : await stdioCaller(options.target);
  await run(caller.call, options.warmup, options.concurrency);
  const cpuBefore = descendants();
  const started = process.hrtime.bigint();
  const latencies = await run(caller.call, options.total, options.concurrency);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const mcpServerCpuUs = options.target.kind === 'stdio' ? cpuBetween(cpuBefore, descendants()) : undefined;
  await caller.close();
  result = {
    ...figures(latencies, seconds),
    ...(mcpServerCpuUs === undefined ? {} : { mcpServerCpuUs }),
  };
}
// Exit once the result is out: a pipe takes 64 KB at a time, and exit() would cut a longer one short.
process.stdout.write(JSON.stringify(result), () => process.exit(0));
