/**
 * `sandbox-cold-start`: what the util-linux sandbox adds to a cold start, against a plain spawn of the
 * same program measured in the same run (runs alternate, so drift in machine load hits both).
 * Scenarios: `node -e 0` to its exit; a tiny stdio echo server to its first answer; and
 * server-everything to its first `tools/list` through the MCP SDK client. The `overhead` rows are
 * the sandboxed median minus the plain one (and the same for p10 and for CPU time, which a loaded
 * machine disturbs less); the target is at most 25 ms. Each program also runs in a sandbox without
 * the syscall filter (`syscallFilter: off`), alternating with the others: the `syscall filter` rows
 * are what the filter (its loader) adds to a sandboxed start; the target is at most 5 ms. And in a
 * sandbox without the CPU burst (`cpuBurst: 0`): the `CPU burst` rows are what a start loses when its
 * cgroup holds it to its quota from the first period (node's start runs several threads). Those
 * runtimes build no spares (`spares.count` 0): their rows are the whole chain. A fifth runtime keeps
 * spares, and each of its starts waits (untimed) for the spare the last one's end left: the `from a
 * spare` rows are a start whose sandbox was built beforehand, as a server's next start after its idle
 * stop is; their CPU includes building the spare a later start takes.
 */
import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { pino } from 'pino';
import { ProcessStdioTransport, type ProcessStdio } from '../core/mcp/process-transport.ts';
import { configSchema, LinuxNamespacesRuntime } from '../plugins/sandboxes/linux-namespaces/index.ts';
import { plainProcess } from './proc.ts';
import { quantile } from './stats.ts';

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..');
const RUNS = Number(process.env.BENCH_COLD_STARTS ?? 30);
/** server-everything takes ~0.4 s a start; fewer runs keep the suite short. */
const MCP_RUNS = Math.max(3, Math.round(RUNS / 3));

export interface ColdStartMeasurement {
  scenario: string;
  /** Starts run one at a time. */
  concurrency: 1;
  /** Starts per second at the median. */
  rps: number;
  p50Ms: number;
  p99Ms: number;
  /** The 10th percentile: on a loaded machine, the closest figure to the uncontended cost. */
  p10Ms: number;
  /**
   * CPU time of the started processes (the whole launch chain for the sandbox) per start, in µs, from
   * this process's children times: every process ends by itself and is waited for, so all of it counts.
   */
  serverCpuUsPerRequest: number;
}

/** Starts the program once; resolves with the milliseconds to its milestone (cleanup is not timed). */
type Start = () => Promise<number>;

/** Starts a program's sandboxed process on one of the runtimes (see `sandboxColdStartSuite`). */
type SandboxLaunch = (
  root: string,
  args: string[],
) => Promise<ProcessStdio & { kill(): Promise<void>; exited: Promise<unknown> }>;

interface Program {
  name: string;
  runs: number;
  plain: Start;
  /** The same start, sandboxed by `launch`. */
  sandboxed: (launch: SandboxLaunch) => Start;
}

/** Children's CPU (user + system) of this process so far, in µs: every start is waited for. */
function childrenCpuUs(): number {
  const stat = readFileSync('/proc/self/stat', 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // cutime and cstime are fields 16 and 17, in clock ticks (100 per second on Linux).
  return (Number(fields[13]) + Number(fields[14])) * 10_000;
}

function summarize(scenario: string, times: number[], cpuUs: number): ColdStartMeasurement {
  const sorted = [...times].sort((a, b) => a - b);
  const p50 = quantile(sorted, 0.5);
  const measurement: ColdStartMeasurement = {
    scenario,
    concurrency: 1,
    rps: Math.round(1000 / p50),
    p50Ms: Number(p50.toFixed(2)),
    p99Ms: Number(quantile(sorted, 0.99).toFixed(2)),
    p10Ms: Number(quantile(sorted, 0.1).toFixed(2)),
    serverCpuUsPerRequest: Math.round(cpuUs / times.length),
  };
  process.stdout.write(`${JSON.stringify(measurement)}\n`);
  return measurement;
}

/** `a` minus `b`, row by row. */
function difference(
  scenario: string,
  a: ColdStartMeasurement,
  b: ColdStartMeasurement,
): ColdStartMeasurement {
  const measurement: ColdStartMeasurement = {
    scenario,
    concurrency: 1,
    rps: 0,
    p50Ms: Number((a.p50Ms - b.p50Ms).toFixed(2)),
    p99Ms: Number((a.p99Ms - b.p99Ms).toFixed(2)),
    p10Ms: Number((a.p10Ms - b.p10Ms).toFixed(2)),
    serverCpuUsPerRequest: a.serverCpuUsPerRequest - b.serverCpuUsPerRequest,
  };
  process.stdout.write(`${JSON.stringify(measurement)}\n`);
  return measurement;
}

/**
 * The sandboxes a program starts in beside its plain start: the default one, one without the syscall
 * filter, one without the CPU burst (`cpuBurst: 0`), and one from a spare.
 */
type Sandboxed = 'sandboxed' | 'unfiltered' | 'unburst' | 'spare';
type Kind = 'plain' | Sandboxed;

/**
 * Runs plain and sandboxed starts alternately and reports each and the differences of their medians.
 */
async function compare(
  program: Program,
  launches: Record<Sandboxed, SandboxLaunch>,
  beforeSpare: () => Promise<unknown>,
): Promise<ColdStartMeasurement[]> {
  const starts: Record<Kind, Start> = {
    plain: program.plain,
    sandboxed: program.sandboxed(launches.sandboxed),
    unfiltered: program.sandboxed(launches.unfiltered),
    unburst: program.sandboxed(launches.unburst),
    // The spare the last start's end left is built (untimed) before the timed start.
    spare: async () => {
      await beforeSpare();
      return program.sandboxed(launches.spare)();
    },
  };
  const kinds = Object.keys(starts) as Kind[];
  const times = Object.fromEntries(kinds.map((kind) => [kind, [] as number[]])) as Record<Kind, number[]>;
  const cpu = Object.fromEntries(kinds.map((kind) => [kind, 0])) as Record<Kind, number>;
  for (const kind of kinds) await starts[kind](); // warm the page cache for all
  for (let run = 0; run < program.runs; run++) {
    for (const kind of kinds) {
      const cpuBefore = childrenCpuUs();
      times[kind].push(await starts[kind]());
      cpu[kind] += childrenCpuUs() - cpuBefore;
    }
  }
  const row = (label: string, kind: Kind) => summarize(`${label}: ${program.name}`, times[kind], cpu[kind]);
  const plain = row('plain', 'plain');
  const sandboxed = row('sandboxed', 'sandboxed');
  const unfiltered = row('sandboxed without the syscall filter', 'unfiltered');
  const unburst = row('sandboxed without the CPU burst', 'unburst');
  const spare = row('sandboxed from a spare', 'spare');
  return [
    plain,
    sandboxed,
    unfiltered,
    unburst,
    spare,
    difference(`overhead (sandboxed − plain median): ${program.name}`, sandboxed, plain),
    difference(`syscall filter (sandboxed − sandboxed without it): ${program.name}`, sandboxed, unfiltered),
    difference(`CPU burst (sandboxed without it − sandboxed): ${program.name}`, unburst, sandboxed),
    difference(
      `overhead from a spare (sandboxed from a spare − plain median): ${program.name}`,
      spare,
      plain,
    ),
  ];
}

const exitOf = (child: { once(event: 'close', listener: () => void): unknown }) =>
  new Promise<void>((resolve) => child.once('close', resolve));

/** Times `start` up to its milestone, then runs the untimed cleanup it returns. */
async function timed(start: () => Promise<() => Promise<unknown>>): Promise<number> {
  const started = performance.now();
  const cleanup = await start();
  const elapsed = performance.now() - started;
  await cleanup();
  return elapsed;
}

type Launch = () => Promise<ProcessStdio & { kill(): Promise<void> }>;

/** Writes one line and waits for it to come back: the first answer of a stdio server. */
const firstEcho = (launch: Launch) =>
  timed(async () => {
    const stdio = await launch();
    const answered = new Promise<void>((resolve) => stdio.stdout.once('data', () => resolve()));
    stdio.stdin.write('{"jsonrpc":"2.0","id":1,"method":"ping"}\n');
    await answered;
    return () => stdio.kill();
  });

/** Connects the SDK client (initialize) and lists the tools. */
const firstToolsList = (launch: Launch) =>
  timed(async () => {
    const client = new Client({ name: 'bench', version: '1.0.0' });
    await client.connect(new ProcessStdioTransport(await launch()));
    await client.listTools();
    return () => client.close();
  });

export async function sandboxColdStartSuite(): Promise<ColdStartMeasurement[]> {
  const work = mkdtempSync(join(tmpdir(), 'sigil-bench-sandbox-'));
  chmodSync(work, 0o755);
  const echoServer = join(work, 'echo.cjs');
  writeFileSync(echoServer, "process.stdin.on('data', (line) => process.stdout.write(line));\n", {
    mode: 0o644,
  });
  const runtimeWith = (options: { syscallFilter?: 'off'; cpuBurst?: number; spares?: number }) =>
    new LinuxNamespacesRuntime({
      config: configSchema.parse({
        stateDir: join(work, 'state'),
        killGraceMs: 2000,
        ...options,
        spares: { count: options.spares ?? 0 },
      }),
      logger: pino({ level: 'silent' }),
    });
  const runtimes: Record<Sandboxed, LinuxNamespacesRuntime> = {
    sandboxed: runtimeWith({}),
    unfiltered: runtimeWith({ syscallFilter: 'off' }),
    unburst: runtimeWith({ cpuBurst: 0 }),
    spare: runtimeWith({ spares: 4 }),
  };
  await Promise.all(Object.values(runtimes).map((runtime) => runtime.start()));
  const node = process.execPath;
  const plainStdio = (args: string[]) => plainProcess(node, args);
  const inSandbox =
    (on: LinuxNamespacesRuntime): SandboxLaunch =>
    async (root, args) => {
      const sandbox = await on.spawn({
        launch: { kind: 'host', runtime: 'node', root, args },
        env: {},
        networkAllowList: [],
      });
      sandbox.stderr.resume();
      return sandbox;
    };
  const launches = Object.fromEntries(
    Object.entries(runtimes).map(([kind, runtime]) => [kind, inSandbox(runtime)]),
  ) as Record<Sandboxed, SandboxLaunch>;
  const everything = join(repoRoot, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js');
  const programs: Program[] = [
    {
      name: 'node -e 0, to exit',
      runs: RUNS,
      // To `exited`, which for the sandbox includes removing its cgroups and files.
      plain: () =>
        timed(async () => {
          await exitOf(spawn(node, ['-e', '0'], { stdio: 'ignore', env: {} }));
          return async () => undefined;
        }),
      sandboxed: (launch) => () =>
        timed(async () => {
          await (
            await launch(work, ['-e', '0'])
          ).exited;
          return async () => undefined;
        }),
    },
    {
      name: 'stdio echo server, to its first answer',
      runs: RUNS,
      plain: () => firstEcho(async () => plainStdio([echoServer])),
      sandboxed: (launch) => () => firstEcho(() => launch(work, [echoServer])),
    },
    {
      name: 'server-everything, to its first tools/list',
      runs: MCP_RUNS,
      plain: () => firstToolsList(async () => plainStdio([everything, 'stdio'])),
      sandboxed: (launch) => () =>
        firstToolsList(() => launch(join(repoRoot, 'node_modules'), [everything, 'stdio'])),
    },
  ];
  const results: ColdStartMeasurement[] = [];
  try {
    for (const program of programs)
      results.push(...(await compare(program, launches, () => runtimes.spare.sparesReady())));
  } finally {
    await Promise.all(Object.values(runtimes).map((runtime) => runtime.stop()));
    rmSync(work, { recursive: true, force: true });
  }
  return results;
}
