/**
 * Load generator for MCP `tools/call`, run as its own process so its CPU never counts as the server's.
 * One JSON argument says what to call:
 *
 * - `{ "kind": "http", url, body, headers, expect, handshake? }`: POSTs `body` (a JSON-RPC request, under
 *   an id of its own each time) over keep-alive `node:http` connections, one per call in flight (fetch
 *   costs several times the server's CPU per request here); every answer must be a 200 whose body holds
 *   `expect` and no `"isError":true`. With `handshake`, each connection first initializes an MCP session,
 *   outside the timed calls (see HttpTarget).
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
import { Agent } from 'node:http';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { pino } from 'pino';
import { ProcessStdioTransport, type ProcessStdio } from '../core/mcp/process-transport.ts';
import { configSchema, LinuxNamespacesRuntime } from '../plugins/sandboxes/linux-namespaces/index.ts';
import { initializeSession, send } from './mcp-http.ts';
import { cpuBetween, descendants } from './proc.ts';

interface HttpTarget {
  kind: 'http';
  url: string;
  body: string;
  headers: Record<string, string>;
  expect: string;
  /**
   * Before its first call, each connection sends `initialize` and `notifications/initialized`, as an
   * MCP client does once per session; a server that answers with an Mcp-Session-Id (a stateful one)
   * gets it on every later call of that connection, and a DELETE of it once the calls are done.
   */
  handshake?: boolean;
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

/** One call on the connection of worker `worker` (one per call in flight). */
type Call = (worker: number) => Promise<void>;

/** The JSON-RPC request `body` under any id: the id in front, the rest serialized once. */
function requestWithIds(body: string): (id: number) => Buffer {
  const { id: _id, ...rest } = JSON.parse(body) as Record<string, unknown>;
  const tail = JSON.stringify(rest).slice(1);
  return (id) => Buffer.from(`{"id":${id},${tail}`);
}

interface HttpCaller {
  call: Call;
  /** The handshake of each worker's connection, where the target asks for one. */
  open(workers: number): Promise<void>;
  close(): Promise<void>;
}

const IDLE_CLOSE_MS = 4000;

function httpCaller(target: HttpTarget): HttpCaller {
  const headers = { ...target.headers, 'content-type': 'application/json' };
  const connections: { agent: Agent; headers: Record<string, string> }[] = [];
  const connection = (worker: number) => {
    connections[worker] ??= {
      // A connection left idle closes on this side first (node:http servers drop it after 5 s): one
      // worker may wait that long for the others, as their handshakes start a server process each.
      agent: new Agent({ keepAlive: true, maxSockets: 1, timeout: IDLE_CLOSE_MS }),
      headers: { ...headers },
    };
    return connections[worker];
  };
  const bodyWith = requestWithIds(target.body);
  let nextId = 0;
  const call: Call = async (worker) => {
    const { agent, headers: sent } = connection(worker);
    nextId += 1;
    const body = bodyWith(nextId);
    const answer = await send(target.url, agent, 'POST', { ...sent, 'content-length': body.length }, body);
    if (
      answer.status !== 200 ||
      !answer.text.includes(target.expect) ||
      answer.text.includes('"isError":true')
    )
      throw new Error(`unexpected answer (${answer.status}): ${answer.text.slice(0, 500)}`);
  };
  const handshake = async (worker: number) => {
    const opened = connection(worker);
    const session = await initializeSession(target.url, opened.agent, opened.headers);
    if (session !== undefined) opened.headers['mcp-session-id'] = session;
  };
  return {
    call,
    open: async (workers) => {
      if (target.handshake)
        await Promise.all(Array.from({ length: workers }, (_, worker) => handshake(worker)));
    },
    close: async () => {
      await Promise.all(
        connections.map(async ({ agent, headers: sent }) => {
          if (sent['mcp-session-id'] !== undefined) await send(target.url, agent, 'DELETE', sent);
          agent.destroy();
        }),
      );
    },
  };
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
async function timed(call: Call, worker: number): Promise<number> {
  const started = process.hrtime.bigint();
  await call(worker);
  return Number(process.hrtime.bigint() - started) / 1e6;
}

async function run(call: Call, count: number, concurrency: number): Promise<number[]> {
  const latencies: number[] = [];
  let next = 0;
  const worker = async (_: unknown, index: number) => {
    while (next < count) {
      next += 1;
      latencies.push(await timed(call, index));
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
    for (const which of order) latencies[which].push(await timed(which === 0 ? first : second, 0));
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
  const mine = httpCaller(options.target);
  const theirs = httpCaller(options.versus);
  await Promise.all([mine.open(1), theirs.open(1)]);
  await interleaved(mine.call, theirs.call, options.warmup);
  const [own, other] = await interleaved(mine.call, theirs.call, options.total);
  await Promise.all([mine.close(), theirs.close()]);
  const took = (latencies: number[]) => latencies.reduce((sum, ms) => sum + ms, 0) / 1000;
  result = { ...figures(own, took(own)), versus: figures(other, took(other)) };
} else {
  const openHttp = async (target: HttpTarget) => {
    const caller = httpCaller(target);
    await caller.open(options.concurrency);
    return caller;
  };
  const caller =
    options.target.kind === 'http' ? await openHttp(options.target) : await stdioCaller(options.target);
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
