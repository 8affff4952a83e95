/**
 * `compiled`: `sigil gateway` as production runs it, the output of `npm run build` (NODE_ENV=production,
 * no tsx), against the TypeScript sources through tsx (the default), each a process of its own on the
 * same config and database: the probe MCP server of the gateway-mcp suite, from a local verdaccio, in
 * the linux-namespaces sandbox, logging at info.
 *
 * - Start-up, BENCH_STARTS times (default 7) each, the two alternating: from spawning `node bin/sigil.js
 *   gateway` to its "gateway http://…" line (listening), and to its first tools/call answered (the probe
 *   server started from the package cache, already verified); server CPU is the gateway process's own
 *   CPU by then (its MCP server's left out).
 * - `sigil up`, compiled only, BENCH_STARTS times: from the spawn to both services' GET /health
 *   answered 200 (the dev chain off: the row measures Sigil's start, not anvil's).
 * - CPU per call: both gateways up, warmed by BENCH_MCP_PREWARM calls, then BENCH_RUNS runs of each
 *   (alternating) of tools/call `echo` through POST /mcp/server/probe from bench/mcp-load.ts; server CPU
 *   is the gateway process's CPU over the run, from /proc.
 *
 * Each comparison row is the median of paired differences (compiled − tsx, run by run).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildInto, type Build } from '../test/support/build.ts';
import { SIGIL_BIN } from '../test/support/cli.ts';
import { startVerdaccio } from '../test/support/verdaccio.ts';
import { callBody, CALLS, mcpHeaders, mcpLoad, post, PREWARM, RUNS, WARMUP } from './gateway.ts';
import type { LoadOptions } from './mcp-load.ts';
import { probeGatewayConfig, probePackage, probeWorkDir } from './probe-gateway.ts';
import { processCpuUs } from './proc.ts';
import { log, median, ms, pairedMedian, rotated, type BenchRow } from './stats.ts';

const STARTS = Number(process.env.BENCH_STARTS ?? 7);
const READY = /^gateway\s+(http:\/\/\S+)$/m;

export interface Mode {
  name: 'compiled' | 'tsx';
  bin: string;
  env: NodeJS.ProcessEnv;
  configFile: string;
}

export interface Gateway {
  child: ChildProcess;
  url: string;
  /** Its stdout up to the ready line. */
  output: string;
  /** Milliseconds from the spawn to the ready line. */
  readyMs: number;
  started: number;
  stop(): Promise<void>;
}

interface Sample {
  ms: number;
  cpuUs: number;
}

/**
 * Spawns `sigil gateway` (or `sigil up`, with `configFile` its own) and resolves at the gateway's
 * ready line, which `sigil up` prints after the runtime's.
 */
export function startGateway(
  mode: Mode,
  cwd: string,
  command: 'gateway' | 'up' = 'gateway',
  configFile = mode.configFile,
): Promise<Gateway> {
  const started = performance.now();
  const child = spawn(
    process.execPath,
    [...startProfileArgs(mode), mode.bin, '--config', configFile, command],
    {
      cwd,
      env: { ...process.env, ...mode.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  const exited = new Promise<number | null>((resolve) => child.once('close', resolve));
  let output = '';
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const url = READY.exec(output)?.[1];
      if (url === undefined) return;
      child.stdout.off('data', onData);
      child.stdout.resume();
      resolve({
        child,
        url,
        output,
        readyMs: performance.now() - started,
        started,
        stop: async () => {
          child.kill('SIGTERM');
          if ((await exited) !== 0) throw new Error(`${mode.name} gateway exited badly:\n${output}`);
        },
      });
    };
    child.stdout.on('data', onData);
    void exited.then((code) => reject(new Error(`${mode.name} gateway exited with ${code}:\n${output}`)));
  });
}

/**
 * With BENCH_CPU_PROFILE=<dir>, each process the suite starts writes a V8 CPU profile of its whole life to
 * <dir>/start-up-<mode>/ as it exits: where a start's time goes before it listens and before its first
 * call (BENCH_CPU_PROFILE_INTERVAL_US as for the other suites).
 */
function startProfileArgs(mode: Mode): string[] {
  const dir = process.env.BENCH_CPU_PROFILE;
  if (dir === undefined) return [];
  const intervalUs = Number(process.env.BENCH_CPU_PROFILE_INTERVAL_US ?? 0);
  return [
    '--cpu-prof',
    `--cpu-prof-dir=${join(dir, `start-up-${mode.name}`)}`,
    ...(intervalUs > 0 ? [`--cpu-prof-interval=${intervalUs}`] : []),
  ];
}

interface Where {
  dir: string;
  catalogFile: string;
  registryUrl: string;
}

/**
 * `sigil gateway` from `bin` with a config of its own under `dir` (database, package cache, sandbox
 * state), so gateways of several modes run side by side: the probe from `registryUrl`, logging at info.
 */
export function gatewayMode(name: Mode['name'], bin: string, env: NodeJS.ProcessEnv, where: Where): Mode {
  const configFile = join(where.dir, `sigil-${name}.config.json`);
  writeFileSync(
    configFile,
    JSON.stringify({
      ...probeGatewayConfig({ ...where, suffix: `-${name}` }),
      database: { url: join(where.dir, `sigil-${name}.db`) },
      log: { level: 'info', format: 'json' },
    }),
  );
  return { name, bin, env, configFile };
}

/** The production build's gateway (NODE_ENV=production). */
export const compiledMode = (build: Build, where: Where): Mode =>
  gatewayMode('compiled', build.sigil, { NODE_ENV: 'production' }, where);

/** Single timed starts: the median, and the slowest in the p99 column. */
function row(scenario: string, samples: Sample[]): BenchRow {
  const measurement = {
    scenario,
    concurrency: 1,
    rps: Math.round(1000 / median(samples.map((s) => s.ms))),
    p50Ms: ms(median(samples.map((s) => s.ms))),
    p99Ms: ms(Math.max(...samples.map((s) => s.ms))),
    serverCpuUsPerRequest: Math.round(median(samples.map((s) => s.cpuUs))),
    runs: samples.map((s) => ({ ms: ms(s.ms), cpuUs: Math.round(s.cpuUs) })),
  };
  log(measurement);
  return measurement;
}

/** compiled − tsx, the median of the differences of the runs of one round. */
function difference(scenario: string, concurrency: number, samples: Map<Mode['name'], Sample[]>): BenchRow {
  const compiled = samples.get('compiled') as Sample[];
  const tsx = samples.get('tsx') as Sample[];
  const measurement = {
    scenario,
    concurrency,
    rps: 0,
    p50Ms: ms(pairedMedian(compiled, tsx, (s) => s.ms)),
    p99Ms: 0,
    serverCpuUsPerRequest: Math.round(pairedMedian(compiled, tsx, (s) => s.cpuUs)),
    runs: compiled.map((s, i) => ({
      ms: ms(s.ms - (tsx[i] as Sample).ms),
      cpuUs: Math.round(s.cpuUs - (tsx[i] as Sample).cpuUs),
    })),
  };
  log(measurement);
  return measurement;
}

interface Run extends Sample {
  rps: number;
  p99Ms: number;
}

export async function compiledSuite(): Promise<BenchRow[]> {
  const build = await buildInto('bench-build');
  const registry = await startVerdaccio({ packages: [{ dir: probePackage }] });
  const { dir, catalogFile } = probeWorkDir('sigil-bench-compiled-');
  const where = { dir, catalogFile, registryUrl: registry.url };
  const modes = [compiledMode(build, where), gatewayMode('tsx', SIGIL_BIN, { NODE_ENV: '' }, where)];
  const start = (mode: Mode) => startGateway(mode, dir);
  const call = async (url: string) => {
    const answer = await post(`${url}/mcp/server/probe`, callBody('echo'));
    if (!answer.includes('bench') || answer.includes('"isError":true')) throw new Error(`call: ${answer}`);
  };
  const results: BenchRow[] = [];
  const running: Gateway[] = [];
  try {
    // Installs, verifies and pins the probe: every later start finds it in its cache and database.
    for (const mode of modes) {
      const gateway = await start(mode);
      await call(gateway.url);
      await gateway.stop();
    }

    const ready = new Map<Mode['name'], Sample[]>(modes.map((mode) => [mode.name, []]));
    const called = new Map<Mode['name'], Sample[]>(modes.map((mode) => [mode.name, []]));
    for (let round = 0; round < STARTS; round++) {
      for (const mode of rotated(modes, round)) {
        const gateway = await start(mode);
        const pid = gateway.child.pid as number;
        ready.get(mode.name)?.push({ ms: gateway.readyMs, cpuUs: processCpuUs(pid) });
        await call(gateway.url);
        called.get(mode.name)?.push({ ms: performance.now() - gateway.started, cpuUs: processCpuUs(pid) });
        await gateway.stop();
      }
    }
    for (const mode of modes)
      results.push(
        row(`start-up, ${mode.name}: spawn → listening`, ready.get(mode.name) as Sample[]),
        row(`start-up, ${mode.name}: spawn → first tools/call answered`, called.get(mode.name) as Sample[]),
      );
    results.push(
      difference('start-up, compiled − tsx: spawn → listening (paired)', 1, ready),
      difference('start-up, compiled − tsx: spawn → first tools/call answered (paired)', 1, called),
    );

    // `sigil up`, compiled: the runtime (with up's plugins: provider-local, the canvas nodes) and the
    // gateway in one process, on the same config with the dev chain off (no anvil) and both ports 0.
    const compiled = modes.find((mode) => mode.name === 'compiled') as Mode;
    const upConfig = join(dir, 'sigil-up-compiled.config.json');
    writeFileSync(
      upConfig,
      JSON.stringify({
        ...JSON.parse(readFileSync(compiled.configFile, 'utf8')),
        runtime: { port: 0 },
        devChain: { enabled: false },
      }),
    );
    const healthy: Sample[] = [];
    for (let round = 0; round < STARTS; round++) {
      const up = await startGateway(compiled, dir, 'up', upConfig);
      const runtimeUrl = /^runtime\s+(http:\/\/\S+)$/m.exec(up.output)?.[1] as string;
      const answers = await Promise.all([runtimeUrl, up.url].map((url) => fetch(`${url}/health`)));
      if (answers.some((answer) => answer.status !== 200)) throw new Error('sigil up: a /health is not 200');
      healthy.push({ ms: performance.now() - up.started, cpuUs: processCpuUs(up.child.pid as number) });
      await up.stop();
    }
    results.push(row('start-up, compiled: sigil up (dev chain off) spawn → both /health 200', healthy));

    const gateways = new Map<Mode['name'], Gateway>();
    for (const mode of modes) {
      const gateway = await start(mode);
      running.push(gateway);
      gateways.set(mode.name, gateway);
    }
    const target = (gateway: Gateway): LoadOptions['target'] => ({
      kind: 'http',
      url: `${gateway.url}/mcp/server/probe`,
      body: callBody('echo'),
      headers: mcpHeaders,
      expect: 'bench',
    });
    for (const gateway of gateways.values())
      await mcpLoad({ target: target(gateway), total: 1, concurrency: 50, warmup: PREWARM });
    for (const concurrency of [1, 50]) {
      const runs = new Map<Mode['name'], Run[]>(modes.map((mode) => [mode.name, []]));
      for (let run = 0; run < RUNS; run++) {
        for (const mode of rotated(modes, run)) {
          const gateway = gateways.get(mode.name) as Gateway;
          const pid = gateway.child.pid as number;
          const cpuBefore = processCpuUs(pid);
          const result = await mcpLoad({
            target: target(gateway),
            total: CALLS,
            concurrency,
            warmup: WARMUP,
          });
          runs.get(mode.name)?.push({
            ms: result.p50,
            cpuUs: (processCpuUs(pid) - cpuBefore) / (CALLS + WARMUP),
            rps: result.rps,
            p99Ms: result.p99,
          });
        }
      }
      for (const mode of modes) {
        const samples = runs.get(mode.name) as Run[];
        const measurement: BenchRow & { runs: object[] } = {
          scenario: `warm, ${mode.name}: tools/call through POST /mcp/server/probe`,
          concurrency,
          rps: Math.round(median(samples.map((s) => s.rps))),
          p50Ms: ms(median(samples.map((s) => s.ms))),
          p99Ms: ms(median(samples.map((s) => s.p99Ms))),
          serverCpuUsPerRequest: Math.round(median(samples.map((s) => s.cpuUs))),
          runs: samples.map((s) => ({
            rps: Math.round(s.rps),
            p50Ms: ms(s.ms),
            p99Ms: ms(s.p99Ms),
            cpuUs: Math.round(s.cpuUs),
          })),
        };
        log(measurement);
        results.push(measurement);
      }
      results.push(difference('warm, compiled − tsx: tools/call p50 and CPU (paired)', concurrency, runs));
    }
  } finally {
    for (const gateway of running) await gateway.stop();
    await registry.stop();
    rmSync(dir, { recursive: true, force: true });
    rmSync(build.dir, { recursive: true, force: true });
  }
  return results;
}
