/**
 * `gateway-mcp`: the tool gateway's MCP hot path against baselines measured in the same run.
 *
 * A real MCP server package (the probe server of the tests) is published to a local verdaccio,
 * installed by the registry-npm plugin and run in the linux-namespaces sandbox by a real gateway
 * (SQLite, or PostgreSQL with BENCH_DATABASE_URL; logging at `info` into /dev/null, asynchronously as
 * in production). Warm scenarios, each repeated BENCH_RUNS times (default 5) with the scenarios
 * interleaved, medians reported:
 *
 * - direct: the SDK `Client` over stdio to the same installed package, sandboxed (the baseline of the
 *   added latency) and plain, from the load process itself;
 * - floor: a bare `node:http` JSON-RPC relay (bench/relay.ts) to a warm sandboxed instance of the same
 *   server: the baseline of the gateway's throughput;
 * - gateway: `tools/call` of `echo` through POST /mcp/server/probe (anonymous) and through POST /mcp
 *   with a wallet token and an X-MCP-Session in which the server is enabled (`probe__echo`), each at
 *   MCP 2025-11-25 and at 2026-07-28 (the envelope in `_meta`, the standard headers), compared pair by
 *   pair; at 1 in flight also with their calls interleaved one by one in the same runs (the target's
 *   rows there: a run's drift is larger than the revisions' difference);
 * - peers (bench/peers.ts): supergateway and mcp-proxy in their Streamable HTTP modes, stateless and
 *   stateful, serving the same installed server as a plain process; each load connection initializes
 *   its session first, outside the timed calls. Rows compare each with the anonymous gateway scenario
 *   (req/s and server CPU per call, paired by round) and, at 1 in flight, with the direct plain call.
 *
 * Each 2026-07-28 scenario runs right after its 2025-11-25 pair, or right before it every other round:
 * a pair sees the same state of the machine and neither revision always goes first. The order of the
 * scenarios (a pair as one) turns by one place from round to round and is reversed every other round,
 * so no scenario always runs after the same one; ratios and differences pair the runs of one round.
 *
 * Cold scenarios: the first `tools/call` after a gateway restart (package in the registry cache, server
 * verified), and `tools/call`s after the warm process was stopped for inactivity, each alternating
 * with a plain and a sandboxed start of the same server to its first tools/list and tools/call. Both
 * sandboxed kinds start after the spare sandbox the last stop left is built (untimed), as a call that
 * comes a while after the idle stop finds it; bench/sandbox.ts has the chain built at the start.
 *
 * Start-up and memory, after those: the compiled gateway (`npm run build`, a process of its own, as
 * bench/compiled.ts starts it) and each peer, BENCH_STARTS times in turn, from the spawn to the first
 * tools/call answered (initialize, notifications/initialized, the call), then one run of calls at 50 in
 * flight and the serving process's resident set after it.
 *
 * Load comes from bench/mcp-load.ts in its own process (a distinct JSON-RPC id per call). "server CPU" is the serving process's CPU per
 * call (the gateway's, the relay's or the peer's; for the direct rows, the MCP server's); "MCP server
 * CPU" is the MCP server processes', from /proc (a peer's children, those ended meanwhile included). For cold rows, server CPU is everything the call made run.
 */
import { execFile } from 'node:child_process';
import { rmSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { LATEST_PROTOCOL_VERSION, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import knex from 'knex';
import { createLogger, logDestination } from '../core/log.ts';
import { ProcessStdioTransport, type ProcessStdio } from '../core/mcp/process-transport.ts';
import { extensionPoints, type PackageRegistryV2 } from '@sigil/plugin-api';
import type { LinuxNamespacesRuntime } from '../plugins/sandboxes/linux-namespaces/index.ts';
import { markedProcesses } from '../plugins/sandboxes/linux-namespaces/leftovers.ts';
import type { Kernel } from '../services/kernel.ts';
import { serve, type Serving } from '../services/serve.ts';
import { openTestKernel, type TestDatabase } from '../test/support/kernel.ts';
import { walletToken } from '../test/services/gateway/support.ts';
import { startVerdaccio } from '../test/support/verdaccio.ts';
import type { LoadOptions, LoadResult } from './mcp-load.ts';
import { probeGatewayConfig, probePackage, probeWorkDir } from './probe-gateway.ts';
import { buildInto, type Build } from '../test/support/build.ts';
import { compiledMode, startGateway as spawnGateway } from './compiled.ts';
import { firstCall, peers, spawnPeer, type RunningPeer } from './peers.ts';
import {
  childrenCpu,
  childrenCpuBetween,
  cpuBetween,
  descendants,
  ownCpuUs,
  plainProcess,
  processCpuUs,
  profiled,
  reapedChildrenCpuUs,
  rssKb,
} from './proc.ts';
import { startRelay } from './relay.ts';
import { log, median, ms, pairedMedian, rotated } from './stats.ts';

const here = dirname(fileURLToPath(import.meta.url));
const execFileAsync = promisify(execFile);

// At 50 in flight a run of 2000 calls lasts under half a second, and one scheduling hiccup of the
// 2-vCPU machine moved a ratio by 20 points: runs are longer, and there are five.
export const CALLS = Number(process.env.BENCH_MCP_CALLS ?? 5000);
export const WARMUP = Number(process.env.BENCH_MCP_WARMUP ?? 2000);
/** Calls each HTTP target gets once before any run: V8 needs several thousand to optimise the hot path. */
export const PREWARM = Number(process.env.BENCH_MCP_PREWARM ?? 5000);
export const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const COLD_CALLS = Number(process.env.BENCH_COLD_CALLS ?? 10);
/** A tools/call after the idle stop, over the plain server's own start to its first tools/call answered. */
const TARGET_COLD_OVER_PLAIN_MS = 10;
const RESTARTS = Number(process.env.BENCH_RESTARTS ?? 3);
/** Starts of each server (the compiled gateway, each peer) to its first answered call. */
const STARTS = Number(process.env.BENCH_STARTS ?? 5);
/**
 * Calls of a run (and its unmeasured warmup) for a peer that starts a server process per request:
 * tens a second on this machine, where the others serve thousands.
 */
const PROCESS_PER_REQUEST_CALLS = Number(process.env.BENCH_PEER_SPAWN_CALLS ?? 200);
const PROCESS_PER_REQUEST_WARMUP = Number(process.env.BENCH_PEER_SPAWN_WARMUP ?? 20);

export interface GatewayMeasurement {
  scenario: string;
  concurrency: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  /**
   * The serving process's CPU per call: the gateway's, the relay's, or (direct rows) the MCP server's;
   * absent where one run serves both revisions.
   */
  serverCpuUsPerRequest?: number;
  /** The MCP server process's CPU per call (the sandbox's whole process tree). */
  mcpServerCpuUsPerCall?: number;
  /** For rows that check a target: what it is and whether the medians meet it. */
  target?: string;
  met?: boolean;
  /** Measured calls per run (after `warmupCalls` unmeasured ones). */
  callsPerRun?: number;
  warmupCalls?: number;
  /** The per-run figures the medians come from (of calls interleaved, the 2025-11-25 ones in `versus`). */
  runs?: (Sample & { mcpServerCpuUs?: number; versus?: Sample })[];
  /** Gateway ÷ peer rows: each round's ratios of req/s and of server CPU per call. */
  ratios?: { rps: number; serverCpu: number }[];
}

type Target = LoadOptions['target'];
interface Scenario {
  name: string;
  target: Target;
  /** A peer serving the target in a process of its own: its CPU is the serving CPU, its children the MCP server's. */
  peer?: RunningPeer & { processPerRequest: boolean };
}
type HttpTarget = NonNullable<LoadOptions['versus']>;

/** What a run says of one scenario's calls. */
interface Sample {
  rps: number;
  p50Ms: number;
  p99Ms: number;
  serverCpuUs?: number;
}

interface Run extends Sample {
  serverCpuUs: number;
  mcpServerCpuUs?: number;
}

/**
 * Processes that are not the gateway's servers (verdaccio), and the peers and spawned gateways with
 * everything under them: left out of the MCP server CPU.
 */
let foreignPids = new Set<number>();
const foreignRoots = new Set<number>();
const serverProcesses = () => {
  const found = descendants();
  for (const pid of foreignPids) found.delete(pid);
  for (const root of foreignRoots) {
    found.delete(root);
    for (const pid of descendants(root).keys()) found.delete(pid);
  }
  return found;
};

/** bench/mcp-load.ts run in a process of its own, and what it measured. */
export async function mcpLoad(options: LoadOptions): Promise<LoadResult> {
  const { stdout } = await execFileAsync(
    process.execPath,
    ['--import', 'tsx', join(here, 'mcp-load.ts'), JSON.stringify(options)],
    { maxBuffer: 1024 * 1024 },
  );
  return JSON.parse(stdout) as LoadResult;
}

async function load(scenario: Scenario, concurrency: number, prewarm = false): Promise<Run> {
  if (!prewarm && scenario.target.kind === 'http')
    return profiled(`${scenario.name}-${concurrency}`, () => measure(scenario, concurrency, false));
  return measure(scenario, concurrency, prewarm);
}

/** Calls of a run and of its warmup, and of the prewarm (`total` 1), for `peer`'s target or any other. */
function callsOf(peer: { processPerRequest: boolean } | undefined, prewarm: boolean) {
  if (peer?.processPerRequest)
    return { total: prewarm ? 1 : PROCESS_PER_REQUEST_CALLS, warmup: PROCESS_PER_REQUEST_WARMUP };
  return prewarm ? { total: 1, warmup: PREWARM } : { total: CALLS, warmup: WARMUP };
}

/** The serving process's CPU and its MCP servers', from now on: the in-process gateway's, or a peer's. */
function meter(peer: RunningPeer | undefined): () => { serverCpuUs: number; mcpCpuUs: number } {
  if (peer) {
    const own = processCpuUs(peer.pid);
    const children = childrenCpu(peer.pid);
    return () => ({
      serverCpuUs: processCpuUs(peer.pid) - own,
      mcpCpuUs: childrenCpuBetween(children, childrenCpu(peer.pid)),
    });
  }
  const own = ownCpuUs();
  const servers = serverProcesses();
  return () => ({ serverCpuUs: ownCpuUs() - own, mcpCpuUs: cpuBetween(servers, serverProcesses()) });
}

async function measure({ target, peer }: Scenario, concurrency: number, prewarm: boolean): Promise<Run> {
  const options: LoadOptions = { target, concurrency, ...callsOf(peer, prewarm) };
  const used = meter(peer);
  const result = await mcpLoad(options);
  const calls = options.total + options.warmup;
  const { serverCpuUs, mcpCpuUs } = used();
  const serverCpu = serverCpuUs / calls;
  const mcpCpu = mcpCpuUs / calls;
  const direct = result.mcpServerCpuUs !== undefined ? result.mcpServerCpuUs / result.requests : undefined;
  return {
    rps: result.rps,
    p50Ms: result.p50,
    p99Ms: result.p99,
    // The direct path has no serving process but the MCP server itself.
    serverCpuUs: direct ?? serverCpu,
    mcpServerCpuUs: direct ?? mcpCpu,
  };
}

function summarize(
  scenario: string,
  concurrency: number,
  runs: Run[],
  calls: { total: number; warmup: number },
): GatewayMeasurement {
  const mcp = runs.map((r) => r.mcpServerCpuUs).filter((v): v is number => v !== undefined);
  const measurement: GatewayMeasurement = {
    scenario,
    concurrency,
    rps: Math.round(median(runs.map((r) => r.rps))),
    p50Ms: ms(median(runs.map((r) => r.p50Ms))),
    p99Ms: ms(median(runs.map((r) => r.p99Ms))),
    serverCpuUsPerRequest: Math.round(median(runs.map((r) => r.serverCpuUs))),
    ...(mcp.length > 0 ? { mcpServerCpuUsPerCall: Math.round(median(mcp)) } : {}),
    callsPerRun: calls.total,
    warmupCalls: calls.warmup,
    runs: runs.map((r) => ({
      rps: Math.round(r.rps),
      p50Ms: ms(r.p50Ms),
      p99Ms: ms(r.p99Ms),
      serverCpuUs: Math.round(r.serverCpuUs),
      ...(r.mcpServerCpuUs === undefined ? {} : { mcpServerCpuUs: Math.round(r.mcpServerCpuUs) }),
    })),
  };
  log(measurement);
  return measurement;
}

const sampleOf = (figures: { rps: number; p50: number; p99: number }): Sample => ({
  rps: figures.rps,
  p50Ms: figures.p50,
  p99Ms: figures.p99,
});

/**
 * The row comparing a 2026-07-28 scenario with the same endpoint at 2025-11-25 (`legacy`) from the
 * samples measured together, `mine[i]` with `base[i]`: one round's runs of each (`paired`), or one run
 * of their calls interleaved (no CPU of its own for either; the row keeps the runs). Medians of the
 * req/s ratios and of the differences; `target`: the row checks the target.
 */
function revisionRow(
  legacy: string,
  concurrency: number,
  {
    mine,
    base,
    interleaved,
    target,
  }: { mine: Sample[]; base: Sample[]; interleaved: boolean; target: boolean },
): GatewayMeasurement {
  const paired = (pick: (sample: Sample) => number) =>
    median(mine.map((sample, i) => pick(sample) - pick(base[i] as Sample)));
  const ratio = median(mine.map((sample, i) => sample.rps / (base[i] as Sample).rps));
  const row: GatewayMeasurement = {
    scenario: `MCP ${MODERN_REVISION} − 2025-11-25 (${legacy.replace('gateway: ', '')}, ${interleaved ? 'calls interleaved' : 'paired'}): ${Math.round(ratio * 100)} % of its req/s`,
    concurrency,
    rps: Math.round(median(mine.map((sample) => sample.rps))),
    p50Ms: ms(paired((sample) => sample.p50Ms)),
    p99Ms: ms(paired((sample) => sample.p99Ms)),
    ...(!interleaved && {
      serverCpuUsPerRequest: Math.round(paired((sample) => sample.serverCpuUs as number)),
    }),
    // The noise of a paired run on this machine is a few per cent either way.
    ...(target && { target: 'not slower: ≥ 95 % of the 2025-11-25 req/s', met: ratio >= 0.95 }),
    ...(interleaved && {
      callsPerRun: CALLS,
      warmupCalls: WARMUP,
      runs: mine.map((sample, i) => ({ ...rounded(sample), versus: rounded(base[i] as Sample) })),
    }),
  };
  process.stdout.write(`${JSON.stringify({ ...row, runs: undefined })}\n`);
  return row;
}

const rounded = (sample: Sample): Sample => ({
  rps: Math.round(sample.rps),
  p50Ms: ms(sample.p50Ms),
  p99Ms: ms(sample.p99Ms),
});

/** A tools/call of `tool`; `modern`: at MCP 2026-07-28, its envelope in `_meta` as an SDK v2 client sends it. */
export const callBody = (tool: string, modern = false) =>
  JSON.stringify({
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: {
      name: tool,
      arguments: { message: 'bench' },
      ...(modern && {
        _meta: {
          'io.modelcontextprotocol/protocolVersion': MODERN_REVISION,
          'io.modelcontextprotocol/clientInfo': { name: 'bench', version: '1.0.0' },
          'io.modelcontextprotocol/clientCapabilities': {},
        },
      }),
    },
  });
export const mcpHeaders = {
  accept: 'application/json, text/event-stream',
  'mcp-protocol-version': LATEST_PROTOCOL_VERSION,
};
const MODERN_REVISION = '2026-07-28';
/** The standard headers of a 2026-07-28 tools/call of `tool` (SEP-2243). */
const modernHeaders = (tool: string) => ({
  'mcp-protocol-version': MODERN_REVISION,
  'mcp-method': 'tools/call',
  'mcp-name': tool,
});

/** One POST over a fresh connection, for setup and the cold calls (single requests, client cost negligible). */
export function post(url: string, body: string, headers: Record<string, string> = {}): Promise<string> {
  const agent = new Agent({ keepAlive: false });
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: 'POST', agent, headers: { ...mcpHeaders, ...headers, 'content-type': 'application/json' } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          if (res.statusCode === 200) resolve(text);
          else reject(new Error(`POST ${url}: ${res.statusCode} ${text}`));
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

/**
 * Waits until every MCP server process of the gateway has ended (e.g. stopped for inactivity), and
 * the spare sandbox their end left is built (plugins/sandboxes/linux-namespaces/spares.ts): a spare's
 * processes wait, so they are not counted as servers.
 */
async function serversGone(sandbox: LinuxNamespacesRuntime): Promise<void> {
  const deadline = Date.now() + 15_000;
  const spareProcesses = () => new Set(markedProcesses().map((p) => p.pid));
  const left = async () =>
    (await sandbox.status()).running > 0 ||
    [...serverProcesses().keys()].some((pid) => !spareProcesses().has(pid));
  while (await left()) {
    if (Date.now() > deadline) throw new Error('MCP server processes did not stop');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await sandbox.sparesReady();
}

/** Times one cold call; CPU counts this process, the server it starts, and any that ended meanwhile. */
async function coldCall(url: string): Promise<Run> {
  const cpuBefore = ownCpuUs() + reapedChildrenCpuUs();
  const serversBefore = serverProcesses();
  const started = performance.now();
  const answer = await post(`${url}/mcp/server/probe`, callBody('echo'));
  const elapsed = performance.now() - started;
  if (!answer.includes('bench') || answer.includes('"isError":true')) throw new Error(`cold call: ${answer}`);
  const mcpCpu = cpuBetween(serversBefore, serverProcesses());
  return {
    rps: 1000 / elapsed,
    p50Ms: elapsed,
    p99Ms: elapsed,
    serverCpuUs: ownCpuUs() + reapedChildrenCpuUs() - cpuBefore + mcpCpu,
    mcpServerCpuUs: mcpCpu,
  };
}

type Launch = () => Promise<ProcessStdio & { kill(): Promise<void> }>;

/**
 * The baselines of a cold call: start the same server directly, initialize an SDK client, list the
 * tools (the first milestone), then call (the second, one list round trip later than a bare call).
 */
async function directColdStart(launch: Launch): Promise<{ list: Run; call: Run }> {
  const serversBefore = serverProcesses();
  const started = performance.now();
  const client = new Client({ name: 'bench-cold', version: '1.0.0' });
  await client.connect(new ProcessStdioTransport(await launch()));
  await client.listTools();
  const listed = performance.now() - started;
  const listCpu = cpuBetween(serversBefore, serverProcesses());
  const result = (await client.callTool({ name: 'echo', arguments: { message: 'bench' } })) as CallToolResult;
  const called = performance.now() - started;
  if (result.isError || !JSON.stringify(result.content).includes('bench'))
    throw new Error(`direct cold call: ${JSON.stringify(result)}`);
  const callCpu = cpuBetween(serversBefore, serverProcesses());
  await client.close();
  const run = (elapsed: number, cpu: number): Run => ({
    rps: 1000 / elapsed,
    p50Ms: elapsed,
    p99Ms: elapsed,
    serverCpuUs: cpu,
    mcpServerCpuUs: cpu,
  });
  return { list: run(listed, listCpu), call: run(called, callCpu) };
}

/** Cold rows: the median and the slowest of single timed calls. */
function summarizeCold(scenario: string, runs: Run[], target = false): GatewayMeasurement {
  const p50 = median(runs.map((r) => r.p50Ms));
  const slowest = Math.max(...runs.map((r) => r.p50Ms));
  const measurement: GatewayMeasurement = {
    scenario,
    concurrency: 1,
    rps: Math.round(1000 / p50),
    p50Ms: ms(p50),
    p99Ms: ms(slowest),
    serverCpuUsPerRequest: Math.round(median(runs.map((r) => r.serverCpuUs))),
    mcpServerCpuUsPerCall: Math.round(median(runs.map((r) => r.mcpServerCpuUs ?? 0))),
    ...(target ? { target: '≤ 500 ms', met: p50 <= 500 } : {}),
    runs: runs.map((r) => ({
      rps: Math.round(r.rps),
      p50Ms: ms(r.p50Ms),
      p99Ms: ms(r.p99Ms),
      serverCpuUs: Math.round(r.serverCpuUs),
      mcpServerCpuUs: Math.round(r.mcpServerCpuUs ?? 0),
    })),
  };
  log(measurement);
  return measurement;
}

/**
 * A peer beside the gateway's anonymous 2025-11-25 scenario, from the runs of the same rounds: at 1 in
 * flight what the peer adds to the direct plain call (the server as the peer runs it); at either, the
 * gateway's req/s and server CPU per call over the peer's (medians of the rounds' ratios; the columns
 * hold gateway − peer).
 */
function peerRows({
  peer,
  concurrency,
  mine,
  theirs,
  direct,
}: {
  peer: string;
  concurrency: number;
  mine: Run[];
  theirs: Run[];
  direct: Run[];
}): GatewayMeasurement[] {
  const rows: GatewayMeasurement[] = [];
  if (concurrency === 1)
    rows.push({
      scenario: `added by ${peer} (− direct plain)`,
      concurrency,
      rps: 0,
      p50Ms: ms(pairedMedian(theirs, direct, (r) => r.p50Ms)),
      p99Ms: ms(pairedMedian(theirs, direct, (r) => r.p99Ms)),
      serverCpuUsPerRequest: Math.round(pairedMedian(theirs, direct, (r) => r.serverCpuUs)),
    });
  const ratios = mine.map((r, i) => ({
    rps: Number((r.rps / (theirs[i] as Run).rps).toFixed(2)),
    serverCpu: Number((r.serverCpuUs / (theirs[i] as Run).serverCpuUs).toFixed(2)),
  }));
  const rps = median(ratios.map((r) => r.rps));
  const cpu = median(ratios.map((r) => r.serverCpu));
  rows.push({
    scenario: `gateway (POST /mcp/server/probe, anonymous) ÷ ${peer}: ${rps.toFixed(2)}× its req/s, ${cpu.toFixed(2)}× its server CPU per call (columns: gateway − peer, paired)`,
    concurrency,
    rps: 0,
    p50Ms: ms(pairedMedian(mine, theirs, (r) => r.p50Ms)),
    p99Ms: ms(pairedMedian(mine, theirs, (r) => r.p99Ms)),
    serverCpuUsPerRequest: Math.round(pairedMedian(mine, theirs, (r) => r.serverCpuUs)),
    ratios,
  });
  for (const row of rows) log(row);
  return rows;
}

/** A server process of its own, started for the start-up and memory rows. */
interface Started {
  pid: number;
  /** Where its tools/call of `echo` goes. */
  url: string;
  /** performance.now() at the spawn. */
  started: number;
  stop(): Promise<void>;
}

interface Starter {
  name: string;
  processPerRequest: boolean;
  start(): Promise<Started>;
}

const NO_CHILDREN = { live: new Map<number, number>(), reapedUs: 0 };

/**
 * Each starter STARTS times, in turn: from the spawn to its first tools/call answered (initialize,
 * notifications/initialized, then the call, as a client starts), the serving process's CPU by then
 * (its MCP servers' in the other column), then one run of calls at 50 in flight and the serving
 * process's resident set after it.
 */
async function startUpAndMemoryRows(starters: Starter[]): Promise<GatewayMeasurement[]> {
  const startUps = new Map<string, Run[]>(starters.map((s) => [s.name, []]));
  const memory = new Map<string, number[]>(starters.map((s) => [s.name, []]));
  for (let round = 0; round < STARTS; round++) {
    for (const starter of rotated(starters, round)) {
      const server = await starter.start();
      foreignRoots.add(server.pid);
      try {
        await firstCall(server.url, mcpHeaders, callBody('echo'));
        const elapsed = performance.now() - server.started;
        startUps.get(starter.name)?.push({
          rps: 1000 / elapsed,
          p50Ms: elapsed,
          p99Ms: elapsed,
          serverCpuUs: processCpuUs(server.pid),
          mcpServerCpuUs: childrenCpuBetween(NO_CHILDREN, childrenCpu(server.pid)),
        });
        await mcpLoad({
          target: {
            kind: 'http',
            url: server.url,
            body: callBody('echo'),
            headers: mcpHeaders,
            expect: 'bench',
            handshake: true,
          },
          concurrency: 50,
          ...callsOf(starter, false),
        });
        memory.get(starter.name)?.push(rssKb(server.pid));
      } finally {
        await server.stop();
        foreignRoots.delete(server.pid);
      }
    }
  }
  const rows: GatewayMeasurement[] = [];
  for (const { name, processPerRequest } of starters) {
    rows.push(
      summarizeCold(
        `start-up, ${name}: spawn → initialize → first tools/call answered`,
        startUps.get(name) as Run[],
      ),
    );
    const rss = (memory.get(name) as number[]).map((kb) => Math.round(kb / 1024));
    const { total, warmup } = callsOf({ processPerRequest }, false);
    const row: GatewayMeasurement & { rssMb: number[] } = {
      scenario: `memory, ${name}: serving process RSS ${median(rss)} MB (${Math.min(...rss)}–${Math.max(...rss)} over ${rss.length} starts) after ${total + warmup} tools/calls at 50 in flight`,
      concurrency: 50,
      rps: 0,
      p50Ms: 0,
      p99Ms: 0,
      rssMb: rss,
    };
    log(row);
    rows.push(row);
  }
  return rows;
}

export async function gatewayMcpSuite(): Promise<GatewayMeasurement[]> {
  const registry = await startVerdaccio({ packages: [{ dir: probePackage }] });
  foreignPids = new Set(descendants().keys());
  const { dir, catalogFile } = probeWorkDir('sigil-bench-gateway-');
  // One database across restarts, so a restarted gateway finds the server verified: a SQLite file, or
  // with BENCH_DATABASE_URL a PostgreSQL schema of its own.
  const pgUrl = process.env.BENCH_DATABASE_URL;
  const pgSchema = `bench_${process.pid}`;
  const database: TestDatabase = pgUrl
    ? { name: 'postgres', fresh: () => ({ url: pgUrl, schema: pgSchema, cleanup: async () => undefined }) }
    : { name: 'sqlite', fresh: () => ({ url: join(dir, 'sigil.db'), cleanup: async () => undefined }) };
  const logger = createLogger({
    level: 'info',
    destination: logDestination('/dev/null'),
  });
  let kernel: Kernel | undefined;
  const startGateway = async (idleTimeoutSeconds: number): Promise<{ serving: Serving; url: string }> => {
    kernel = await openTestKernel({
      database,
      logger,
      config: probeGatewayConfig({
        dir,
        catalogFile,
        registryUrl: registry.url,
        gateway: { idleTimeoutSeconds },
      }),
    });
    const serving = await serve(kernel, ['gateway']);
    return { serving, url: serving.urls.gateway as string };
  };

  const results: GatewayMeasurement[] = [];
  let serving: Serving | undefined;
  const runningPeers: RunningPeer[] = [];
  let build: Build | undefined;
  try {
    const warm = await startGateway(300);
    serving = warm.serving;
    const { url } = warm;
    // Verifies (installs, probes, pins) the server, then warms the anonymous process.
    await post(`${url}/mcp/server/probe`, callBody('echo'));
    const { token } = await walletToken(url);
    const walletHeaders = { authorization: `Bearer ${token}`, 'x-mcp-session': 'bench' };
    const enabled = await post(
      `${url}/mcp`,
      JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'gateway_enable_server', arguments: { serverId: 'probe' } },
      }),
      walletHeaders,
    );
    if (!enabled.includes('probe__echo')) throw new Error(`enabling the server failed: ${enabled}`);

    // The same installed package the gateway runs, for the direct and relay baselines.
    const npm = (kernel as Kernel).plugins
      .extensions(extensionPoints.registryKinds)
      .get('npm') as PackageRegistryV2;
    const installed = await npm.install(
      await npm.resolve({ name: '@sigil-test/probe-server', range: '^1.0.0' }),
      { bin: 'sigil-probe', args: [] },
    );
    const { launch } = installed;
    if (launch.kind !== 'host') throw new Error('the npm registry answered an image');
    const entry = launch.args[0] as string;
    const relayServer = await (kernel as Kernel).plugins
      .one('sandbox-runtime')
      .spawn({ launch: installed.launch, env: {}, networkAllowList: [] });
    relayServer.stderr?.resume();
    const relay = await startRelay(relayServer);
    // The peers run the same installed server as a plain process, as their READMEs run a server.
    const plainServer = [process.execPath, entry];
    for (const peer of peers) {
      const running = await spawnPeer(peer, plainServer, launch.root);
      runningPeers.push(running);
      foreignRoots.add(running.pid);
      await firstCall(running.url, mcpHeaders, callBody('echo'));
    }

    const direct = (sandboxed: boolean): Target => ({
      kind: 'stdio',
      packagePath: launch.root,
      entry,
      args: [],
      ...(sandboxed ? { sandboxStateDir: join(dir, 'sandboxes-direct') } : {}),
      tool: 'echo',
      arguments: { message: 'bench' },
      expect: 'bench',
    });
    const http = (
      target: string,
      tool: string,
      headers: Record<string, string> = {},
      modern = false,
    ): HttpTarget => ({
      kind: 'http',
      url: target,
      body: callBody(tool, modern),
      headers: { ...mcpHeaders, ...headers, ...(modern ? modernHeaders(tool) : {}) },
      expect: 'bench',
    });
    const scenarios: Scenario[] = [
      { name: 'direct: SDK client → server over stdio (sandboxed)', target: direct(true) },
      { name: 'direct: SDK client → server over stdio (plain)', target: direct(false) },
      {
        name: 'floor: bare node:http JSON-RPC relay → warm sandboxed server',
        target: http(relay.url, 'echo'),
      },
      {
        name: 'gateway: POST /mcp/server/probe, anonymous',
        target: http(`${url}/mcp/server/probe`, 'echo'),
      },
      {
        name: 'gateway: POST /mcp, wallet token + X-MCP-Session, enabled server',
        target: http(`${url}/mcp`, 'probe__echo', walletHeaders),
      },
      {
        name: `gateway: POST /mcp/server/probe, anonymous, MCP ${MODERN_REVISION}`,
        target: http(`${url}/mcp/server/probe`, 'echo', {}, true),
      },
      {
        name: `gateway: POST /mcp, wallet token + X-MCP-Session, enabled server, MCP ${MODERN_REVISION}`,
        target: http(`${url}/mcp`, 'probe__echo', walletHeaders, true),
      },
    ];
    /** Each 2026-07-28 scenario and the same endpoint at 2025-11-25, paired run by run. */
    const revisionPairs = scenarios
      .filter((s) => s.name.endsWith(`, MCP ${MODERN_REVISION}`))
      .map((modern) => {
        const name = modern.name.replace(`, MCP ${MODERN_REVISION}`, '');
        return { modern, legacy: scenarios.find((s) => s.name === name) as Scenario };
      });
    const [directSandboxed, directPlain, floor, ...gateways] = scenarios;
    const anonymous = gateways[0] as Scenario;
    // Each client connection initializes its session first (outside the timed calls).
    const peerScenarios: Scenario[] = peers.map((peer, i) => {
      const running = runningPeers[i] as RunningPeer;
      return {
        name: `peer: ${peer.name}, POST /mcp`,
        target: { ...http(running.url, 'echo'), handshake: true },
        peer: { ...running, processPerRequest: peer.processPerRequest === true },
      };
    });
    // Turning alone keeps every scenario's neighbours, and ran 2025-11-25 first in most rounds.
    const units = [...scenarios, ...peerScenarios]
      .filter((s) => !revisionPairs.some((pair) => pair.modern === s))
      .map((s) => [s, ...revisionPairs.filter((pair) => pair.legacy === s).map((pair) => pair.modern)]);
    const roundOrder = (run: number) => {
      const order = rotated(units, run).flat();
      return run % 2 === 0 ? order : order.reverse();
    };
    const measured = [...scenarios, ...peerScenarios];
    for (const scenario of measured) if (scenario.target.kind === 'http') await load(scenario, 50, true);
    for (const concurrency of [1, 50]) {
      const runs = new Map<string, Run[]>(measured.map((s) => [s.name, []]));
      for (let run = 0; run < RUNS; run++) {
        // Each run in another order: a scenario's runs are not always the ones after the same other
        // scenario (garbage left by the one before, a server process just gone idle).
        for (const scenario of roundOrder(run)) {
          (runs.get(scenario.name) as Run[]).push(await load(scenario, concurrency));
        }
      }
      for (const scenario of measured)
        results.push(
          summarize(
            scenario.name,
            concurrency,
            runs.get(scenario.name) as Run[],
            callsOf(scenario.peer, false),
          ),
        );
      results.push(
        ...peerScenarios.flatMap((peer) =>
          peerRows({
            peer: peer.name,
            concurrency,
            mine: runs.get(anonymous.name) as Run[],
            theirs: runs.get(peer.name) as Run[],
            direct: runs.get((directPlain as Scenario).name) as Run[],
          }),
        ),
      );
      for (const { modern, legacy } of revisionPairs) {
        results.push(
          revisionRow(legacy.name, concurrency, {
            mine: runs.get(modern.name) as Run[],
            base: runs.get(legacy.name) as Run[],
            interleaved: false,
            target: concurrency !== 1,
          }),
        );
      }
      // At one in flight a run's req/s is its latency's inverse, and the drift of the 2-vCPU machine
      // from run to run (a quiet machine's runs of one scenario spread ±20 %) is larger than what the
      // revisions differ by (µs per call): the target is checked on calls interleaved one by one.
      if (concurrency === 1) {
        for (const { modern, legacy } of revisionPairs) {
          const mine: Sample[] = [];
          const base: Sample[] = [];
          if (legacy.target.kind !== 'http') throw new Error(`${legacy.name}: not an HTTP target`);
          for (let run = 0; run < RUNS; run++) {
            const { versus, ...own } = await mcpLoad({
              target: modern.target,
              versus: legacy.target,
              total: CALLS,
              concurrency,
              warmup: WARMUP,
            });
            if (!versus) throw new Error('the load process measured no interleaved calls');
            mine.push(sampleOf(own));
            base.push(sampleOf(versus));
          }
          results.push(
            revisionRow(legacy.name, concurrency, { mine, base, interleaved: true, target: true }),
          );
        }
      }
      for (const gateway of gateways) {
        const mine = runs.get(gateway.name) as Run[];
        if (concurrency === 1) {
          const base = runs.get((directSandboxed as { name: string }).name) as Run[];
          const added = (pick: (r: Run) => number) =>
            median(mine.map((r, i) => pick(r) - pick(base[i] as Run)));
          const p50 = added((r) => r.p50Ms);
          const p99 = added((r) => r.p99Ms);
          const row: GatewayMeasurement = {
            scenario: `added by the gateway (${gateway.name.replace('gateway: ', '')} − direct sandboxed)`,
            concurrency,
            rps: 0,
            p50Ms: ms(p50),
            p99Ms: ms(p99),
            serverCpuUsPerRequest: Math.round(added((r) => r.serverCpuUs)),
            target: 'added p50 ≤ 1 ms and p99 ≤ 5 ms',
            met: p50 <= 1 && p99 <= 5,
          };
          process.stdout.write(`${JSON.stringify(row)}\n`);
          results.push(row);
        } else {
          const base = runs.get((floor as { name: string }).name) as Run[];
          const ratio = median(mine.map((r, i) => r.rps / (base[i] as Run).rps));
          const row: GatewayMeasurement = {
            scenario: `${gateway.name.replace('gateway: ', '')}: ${Math.round(ratio * 100)} % of the relay floor's req/s`,
            concurrency,
            rps: Math.round(median(mine.map((r) => r.rps))),
            p50Ms: ms(median(mine.map((r) => r.p50Ms))),
            p99Ms: ms(median(mine.map((r) => r.p99Ms))),
            serverCpuUsPerRequest: Math.round(median(mine.map((r) => r.serverCpuUs))),
            target: '≥ 70 % of the floor',
            met: ratio >= 0.7,
          };
          process.stdout.write(`${JSON.stringify(row)}\n`);
          results.push(row);
        }
      }
    }
    await relay.close();
    await relayServer.kill();
    for (const peer of runningPeers.splice(0)) await peer.stop();
    await serving.stop();
    serving = undefined;

    // Cold calls: the package is in the registry cache and the server verified (same database).
    // After the idle stop, each gateway call alternates with direct starts of the same server.
    const afterRestart: Run[] = [];
    const cold = {
      gateway: [] as Run[],
      plain: [] as Run[],
      sandboxed: [] as Run[],
      plainList: [] as Run[],
      sandboxedList: [] as Run[],
    };
    const plainLaunch: Launch = async () => plainProcess(process.execPath, [entry]);
    for (let restart = 0; restart < RESTARTS; restart++) {
      const restarted = await startGateway(1);
      serving = restarted.serving;
      afterRestart.push(await coldCall(restarted.url));
      if (restart < RESTARTS - 1) {
        await serving.stop();
        serving = undefined;
        continue;
      }
      const sandboxLaunch: Launch = async () => {
        const sandbox = await (kernel as Kernel).plugins
          .one('sandbox-runtime')
          .spawn({ launch: installed.launch, env: {}, networkAllowList: [] });
        sandbox.stderr?.resume();
        return sandbox;
      };
      const sandbox = (kernel as Kernel).plugins.one('sandbox-runtime') as LinuxNamespacesRuntime;
      for (let call = 0; call < COLD_CALLS; call++) {
        await serversGone(sandbox);
        cold.gateway.push(await coldCall(restarted.url));
        const plain = await directColdStart(plainLaunch);
        cold.plainList.push(plain.list);
        cold.plain.push(plain.call);
        await serversGone(sandbox);
        const sandboxed = await directColdStart(sandboxLaunch);
        cold.sandboxedList.push(sandboxed.list);
        cold.sandboxed.push(sandboxed.call);
      }
    }
    if (afterRestart.length > 0)
      results.push(
        summarizeCold(
          'cold: first tools/call after a gateway restart (registry lookup, cache, sandbox, initialize, call)',
          afterRestart,
          true,
        ),
      );
    if (cold.gateway.length > 0) {
      const gatewayRow = summarizeCold(
        'cold: tools/call after the idle stop, from the cache (the spare sandbox its stop left, initialize, call)',
        cold.gateway,
        true,
      );
      results.push(
        summarizeCold('cold start, plain: the same server → initialize → first tools/list', cold.plainList),
        summarizeCold(
          'cold start, sandboxed (from the spare the last stop left): the same server → initialize → first tools/list',
          cold.sandboxedList,
        ),
        summarizeCold('cold start, plain: … then its first tools/call answered', cold.plain),
        summarizeCold(
          'cold start, sandboxed (from a spare): … then its first tools/call answered',
          cold.sandboxed,
        ),
        gatewayRow,
      );
      const added = (mine: Run[], base: Run[]) =>
        median(mine.map((r, i) => r.p50Ms - (base[i] as Run).p50Ms));
      for (const [scenario, mine, base, target] of [
        [
          'cold overhead: sandboxed − plain start to the first tools/list (median of paired differences)',
          cold.sandboxedList,
          cold.plainList,
        ],
        [
          'cold overhead: gateway tools/call − sandboxed start to its first tools/call (paired)',
          cold.gateway,
          cold.sandboxed,
        ],
        [
          'cold overhead: gateway tools/call after the idle stop − plain start to its first tools/call (paired)',
          cold.gateway,
          cold.plain,
          TARGET_COLD_OVER_PLAIN_MS,
        ],
      ] as const) {
        const p50Ms = ms(added(mine, base));
        const row: GatewayMeasurement = {
          scenario,
          concurrency: 1,
          rps: 0,
          p50Ms,
          p99Ms: 0,
          serverCpuUsPerRequest: Math.round(
            median(mine.map((r, i) => r.serverCpuUs - (base[i] as Run).serverCpuUs)),
          ),
          ...(target === undefined
            ? {}
            : { target: `≤ ${target} ms (issue 30, target 4)`, met: p50Ms <= target }),
        };
        process.stdout.write(`${JSON.stringify(row)}\n`);
        results.push(row);
      }
    }

    // Start-up and memory: the gateway as production runs it (the compiled build, a process of its
    // own, on this suite's registry and catalog) beside each peer.
    await serving?.stop();
    serving = undefined;
    build = await buildInto('bench-build');
    const compiled = compiledMode(build, { dir, catalogFile, registryUrl: registry.url });
    const startCompiled = async (): Promise<Started> => {
      const gateway = await spawnGateway(compiled, dir);
      return {
        pid: gateway.child.pid as number,
        url: `${gateway.url}/mcp/server/probe`,
        started: gateway.started,
        stop: () => gateway.stop(),
      };
    };
    // Installs, verifies and pins the probe: every later start finds it in its cache and database.
    const installing = await startCompiled();
    await firstCall(installing.url, mcpHeaders, callBody('echo'));
    await installing.stop();
    results.push(
      ...(await startUpAndMemoryRows([
        { name: 'gateway (compiled)', processPerRequest: false, start: startCompiled },
        ...peers.map((peer) => ({
          name: peer.name,
          processPerRequest: peer.processPerRequest === true,
          start: () => spawnPeer(peer, [process.execPath, entry], launch.root),
        })),
      ])),
    );
  } finally {
    await serving?.stop();
    for (const peer of runningPeers) await peer.stop();
    await registry.stop();
    rmSync(dir, { recursive: true, force: true });
    if (build) rmSync(build.dir, { recursive: true, force: true });
    if (pgUrl) {
      const admin = knex({ client: 'pg', connection: pgUrl, pool: { min: 0, max: 1 } });
      await admin.raw(`drop schema if exists "${pgSchema}" cascade`).finally(() => admin.destroy());
    }
  }
  return results;
}
