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
 *   rows there: a run's drift is larger than the revisions' difference).
 *
 * Each 2026-07-28 scenario runs right after its 2025-11-25 pair, or right before it every other round:
 * a pair sees the same state of the machine and neither revision always goes first. The order of the
 * scenarios (a pair as one) turns by one place from round to round and is reversed every other round,
 * so no scenario always runs after the same one; ratios and differences pair the runs of one round.
 *
 * Cold scenarios: the first `tools/call` after a gateway restart (package in the registry cache, server
 * verified), and `tools/call`s after the warm process was stopped for inactivity, each alternating
 * with a plain and a sandboxed start of the same server to its first tools/list and tools/call.
 *
 * Load comes from bench/mcp-load.ts in its own process. "server CPU" is the serving process's CPU per
 * call (the gateway's or the relay's; for the direct rows, the MCP server's); "MCP server CPU" is the
 * sandboxed server's, from /proc. For cold rows, server CPU is everything the call made run.
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
import type { Kernel } from '../services/kernel.ts';
import { serve, type Serving } from '../services/serve.ts';
import { openTestKernel, type TestDatabase } from '../test/support/kernel.ts';
import { walletToken } from '../test/services/gateway/support.ts';
import { startVerdaccio } from '../test/support/verdaccio.ts';
import type { LoadOptions, LoadResult } from './mcp-load.ts';
import { probeGatewayConfig, probePackage, probeWorkDir } from './probe-gateway.ts';
import { cpuBetween, descendants, ownCpuUs, plainProcess, profiled, reapedChildrenCpuUs } from './proc.ts';
import { startRelay } from './relay.ts';
import { log, median, ms, rotated } from './stats.ts';

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
const RESTARTS = Number(process.env.BENCH_RESTARTS ?? 3);

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
}

type Target = LoadOptions['target'];
interface Scenario {
  name: string;
  target: Target;
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

/** Processes that are not the gateway's servers (verdaccio): left out of the MCP server CPU. */
let foreignPids = new Set<number>();
const serverProcesses = () => {
  const found = descendants();
  for (const pid of foreignPids) found.delete(pid);
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

async function load(target: Target, concurrency: number, prewarm = false, name = ''): Promise<Run> {
  if (!prewarm && target.kind === 'http')
    return profiled(`${name}-${concurrency}`, () => measure(target, concurrency, false));
  return measure(target, concurrency, prewarm);
}

async function measure(target: Target, concurrency: number, prewarm: boolean): Promise<Run> {
  const options: LoadOptions = prewarm
    ? { target, total: 1, concurrency, warmup: PREWARM }
    : { target, total: CALLS, concurrency, warmup: WARMUP };
  const cpuBefore = ownCpuUs();
  const serversBefore = serverProcesses();
  const result = await mcpLoad(options);
  const calls = options.total + options.warmup;
  const serverCpu = (ownCpuUs() - cpuBefore) / calls;
  const mcpCpu = cpuBetween(serversBefore, serverProcesses()) / calls;
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

function summarize(scenario: string, concurrency: number, runs: Run[]): GatewayMeasurement {
  const mcp = runs.map((r) => r.mcpServerCpuUs).filter((v): v is number => v !== undefined);
  const measurement: GatewayMeasurement = {
    scenario,
    concurrency,
    rps: Math.round(median(runs.map((r) => r.rps))),
    p50Ms: ms(median(runs.map((r) => r.p50Ms))),
    p99Ms: ms(median(runs.map((r) => r.p99Ms))),
    serverCpuUsPerRequest: Math.round(median(runs.map((r) => r.serverCpuUs))),
    ...(mcp.length > 0 ? { mcpServerCpuUsPerCall: Math.round(median(mcp)) } : {}),
    callsPerRun: CALLS,
    warmupCalls: WARMUP,
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

/** Waits until every MCP server process of the gateway has ended (e.g. stopped for inactivity). */
async function serversGone(): Promise<void> {
  const deadline = Date.now() + 15_000;
  while (serverProcesses().size > 0) {
    if (Date.now() > deadline) throw new Error('MCP server processes did not stop');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
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
    const [directSandboxed, , floor, ...gateways] = scenarios;
    // Turning alone keeps every scenario's neighbours, and ran 2025-11-25 first in most rounds.
    const units = scenarios
      .filter((s) => !revisionPairs.some((pair) => pair.modern === s))
      .map((s) => [s, ...revisionPairs.filter((pair) => pair.legacy === s).map((pair) => pair.modern)]);
    const roundOrder = (run: number) => {
      const order = rotated(units, run).flat();
      return run % 2 === 0 ? order : order.reverse();
    };
    for (const scenario of scenarios)
      if (scenario.target.kind === 'http') await load(scenario.target, 50, true);
    for (const concurrency of [1, 50]) {
      const runs = new Map<string, Run[]>(scenarios.map((s) => [s.name, []]));
      for (let run = 0; run < RUNS; run++) {
        // Each run in another order: a scenario's runs are not always the ones after the same other
        // scenario (garbage left by the one before, a server process just gone idle).
        for (const scenario of roundOrder(run)) {
          (runs.get(scenario.name) as Run[]).push(
            await load(scenario.target, concurrency, false, scenario.name),
          );
        }
      }
      for (const scenario of scenarios)
        results.push(summarize(scenario.name, concurrency, runs.get(scenario.name) as Run[]));
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
      for (let call = 0; call < COLD_CALLS; call++) {
        await serversGone();
        cold.gateway.push(await coldCall(restarted.url));
        const plain = await directColdStart(plainLaunch);
        cold.plainList.push(plain.list);
        cold.plain.push(plain.call);
        await serversGone();
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
        'cold: tools/call after the idle stop, from the cache (sandbox, initialize, call)',
        cold.gateway,
        true,
      );
      results.push(
        summarizeCold('cold start, plain: the same server → initialize → first tools/list', cold.plainList),
        summarizeCold(
          'cold start, sandboxed: the same server → initialize → first tools/list',
          cold.sandboxedList,
        ),
        summarizeCold('cold start, plain: … then its first tools/call answered', cold.plain),
        summarizeCold('cold start, sandboxed: … then its first tools/call answered', cold.sandboxed),
        gatewayRow,
      );
      const added = (mine: Run[], base: Run[]) =>
        median(mine.map((r, i) => r.p50Ms - (base[i] as Run).p50Ms));
      for (const [scenario, mine, base] of [
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
      ] as const) {
        const row: GatewayMeasurement = {
          scenario,
          concurrency: 1,
          rps: 0,
          p50Ms: ms(added(mine, base)),
          p99Ms: 0,
          serverCpuUsPerRequest: Math.round(
            median(mine.map((r, i) => r.serverCpuUs - (base[i] as Run).serverCpuUs)),
          ),
        };
        process.stdout.write(`${JSON.stringify(row)}\n`);
        results.push(row);
      }
    }
  } finally {
    await serving?.stop();
    await registry.stop();
    rmSync(dir, { recursive: true, force: true });
    if (pgUrl) {
      const admin = knex({ client: 'pg', connection: pgUrl, pool: { min: 0, max: 1 } });
      await admin.raw(`drop schema if exists "${pgSchema}" cascade`).finally(() => admin.destroy());
    }
  }
  return results;
}
