/**
 * `mcp-downstream`: what the gateway's own tools/call costs (core/mcp/call-tool.ts) against a server
 * at each MCP revision, with nothing else of the gateway in the way. Plain child processes (the
 * sandbox's cost is `gateway-mcp`'s), connected as the launcher connects them (an SDK v2 client over
 * a ProcessStdioTransport), called with `echo` from this process:
 *
 * - the probe server (SDK 1.x), at 2025-11-25: today's path;
 * - the modern echo server (SDK v2), at 2025-11-25 (opened with `initialize`) and at 2026-07-28
 *   (opened with `server/discover`): the same server, so the pair differs only by the revision, that
 *   is the envelope on every call and the `resultType` read from every result.
 *
 * "server CPU" is this process's CPU per call (the gateway's side of the call); "MCP server CPU" the
 * server process's, from /proc. Each scenario runs BENCH_RUNS times, interleaved; medians reported.
 */
import { Client, type Transport } from '@modelcontextprotocol/client';
import { callTool, type ToolCallOutcome } from '../core/mcp/call-tool.ts';
import { ModernEnvelopes, type McpProtocol } from '../core/mcp/era.ts';
import { ProcessStdioTransport } from '../core/mcp/process-transport.ts';
import { fixturePath } from '../test/support/paths.ts';
import { cpuBetween, descendants, ownCpuUs, plainProcess } from './proc.ts';
import { log, median, ms, quantile, rotated, type BenchRow } from './stats.ts';

const CALLS = Number(process.env.BENCH_MCP_CALLS ?? 5000);
const WARMUP = Number(process.env.BENCH_MCP_WARMUP ?? 2000);
const RUNS = Number(process.env.BENCH_RUNS ?? 5);

export interface DownstreamMeasurement extends BenchRow {
  serverCpuUsPerRequest: number;
  mcpServerCpuUsPerCall: number;
  runs: { rps: number; p50Ms: number; p99Ms: number; cpuUs: number; mcpCpuUs: number }[];
}

interface Target {
  scenario: string;
  call(): Promise<ToolCallOutcome>;
  pid: number;
  close(): Promise<void>;
}

async function connect(scenario: string, script: string, protocol: McpProtocol): Promise<Target> {
  const before = new Set(descendants().keys());
  const child = plainProcess(process.execPath, [script]);
  const [pid] = [...descendants().keys()].filter((found) => !before.has(found));
  const transport = new ProcessStdioTransport(child);
  const client = new Client(
    { name: 'sigil-gateway', version: 'bench' },
    protocol.era === 'modern' ? { versionNegotiation: { mode: { pin: protocol.version } } } : {},
  );
  await client.connect(transport as unknown as Transport);
  if (client.getNegotiatedProtocolVersion() !== protocol.version)
    throw new Error(`${scenario}: connected at ${String(client.getNegotiatedProtocolVersion())}`);
  const envelopes =
    protocol.era === 'modern'
      ? new ModernEnvelopes(protocol.version, { name: 'sigil-gateway', version: 'bench' })
      : undefined;
  const args = { message: 'hello' };
  return {
    scenario,
    pid: pid ?? 0,
    call: () => callTool(transport, 'echo', args, { timeoutMs: 10_000 }, envelopes),
    close: () => client.close(),
  };
}

async function measure(target: Target, concurrency: number) {
  const pump = async (calls: number, latencies?: number[]) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < calls) {
          next += 1;
          const started = performance.now();
          await target.call();
          latencies?.push(performance.now() - started);
        }
      }),
    );
  };
  await pump(WARMUP);
  const latencies: number[] = [];
  const [cpuBefore, mcpBefore, started] = [ownCpuUs(), descendants(), performance.now()];
  await pump(CALLS, latencies);
  const seconds = (performance.now() - started) / 1000;
  const mcpAfter = descendants();
  const cpuUs = (ownCpuUs() - cpuBefore) / CALLS;
  const only = (found: Map<number, number>) => new Map([...found].filter(([pid]) => pid === target.pid));
  const mcpCpuUs = cpuBetween(only(mcpBefore), only(mcpAfter)) / CALLS;
  latencies.sort((a, b) => a - b);
  return {
    rps: Math.round(CALLS / seconds),
    p50Ms: ms(quantile(latencies, 0.5)),
    p99Ms: ms(quantile(latencies, 0.99)),
    cpuUs: Math.round(cpuUs),
    mcpCpuUs: Math.round(mcpCpuUs),
  };
}

export async function mcpDownstreamSuite(): Promise<DownstreamMeasurement[]> {
  const probe = fixturePath('mcp', 'probe-package', 'server.mjs');
  const modern = fixturePath('mcp', 'modern-echo-package', 'server.mjs');
  const legacy: McpProtocol = { era: 'legacy', version: '2025-11-25' };
  const targets = [
    await connect('probe server (SDK 1.x) at 2025-11-25', probe, legacy),
    await connect('modern echo server (SDK v2) at 2025-11-25', modern, legacy),
    await connect('modern echo server (SDK v2) at 2026-07-28', modern, {
      era: 'modern',
      version: '2026-07-28',
    }),
  ];
  const results: DownstreamMeasurement[] = [];
  try {
    for (const concurrency of [1, 50]) {
      const runs = new Map(targets.map((target) => [target, [] as Awaited<ReturnType<typeof measure>>[]]));
      for (let round = 0; round < RUNS; round += 1) {
        for (const target of rotated(targets, round))
          runs.get(target)?.push(await measure(target, concurrency));
      }
      for (const [target, samples] of runs) {
        const row: DownstreamMeasurement = {
          scenario: `direct: gateway tools/call → ${target.scenario}`,
          concurrency,
          rps: median(samples.map((s) => s.rps)),
          p50Ms: ms(median(samples.map((s) => s.p50Ms))),
          p99Ms: ms(median(samples.map((s) => s.p99Ms))),
          serverCpuUsPerRequest: median(samples.map((s) => s.cpuUs)),
          mcpServerCpuUsPerCall: median(samples.map((s) => s.mcpCpuUs)),
          runs: samples,
        };
        log(row);
        results.push(row);
      }
    }
  } finally {
    await Promise.all(targets.map((target) => target.close()));
  }
  return results;
}
