/**
 * `registry-kinds`: one small MCP server delivered by each registry kind and run in the sandbox an
 * operator runs that kind in, each against the plain process of the same program (node or python3
 * started with child_process, no sandbox) measured in the same run:
 *
 * - npm: sigil-test-node-echo-server (test/fixtures/mcp/node-echo-server: plain Node, one dependency)
 *   published to a local verdaccio, installed by registry-npm, run in sandbox-linux-namespaces, with
 *   its syscall filter and without it (the filter's rows);
 * - PyPI: sigil-echo-server (test/fixtures/python: plain Python, one dependency), its wheels served by
 *   a local PEP 503/691 index, installed by registry-pypi, run the same way;
 * - OCI: the test engine's python image (test/support/docker.ts: this host's python3 and
 *   test/fixtures/mcp/python-echo/server.py) pushed to a local docker-registry, installed by
 *   registry-oci, run by sandbox-docker with runc (stdio through pipes) and with runsc (gVisor, stdio
 *   through the engine's attach).
 *
 * An npm and a Python server cannot be the same bytes; each kind's plain process runs the very files
 * its sandbox runs (the OCI one, the image's server.py on this host's python3, which the image holds).
 *
 * Cold start: the registry's install of the pinned package from its cache (resolved and installed
 * once before), the sandbox's spawn, the official SDK client's initialize over the sandbox's stdio,
 * and the first `tools/call` answered; for the plain process: spawn, initialize, call. Every way of
 * starting every server runs once per round, in another order each round, so drift in the machine's
 * load hits all; overheads are medians of the paired differences of a round. Warm: `echo` calls, one
 * in flight, on one connection to a server started for them; the ways alternate in blocks, and the
 * overheads pair a round's blocks.
 *
 * The plugins are made by the plugin host from their builtin manifests, as the gateway makes them.
 * Without a Docker engine, docker-registry or runsc, the rows that need one are left out, saying why.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import {
  type EntryPoint,
  extensionPoints,
  type HostLaunch,
  type PackageRegistryV2,
  type PackageSpec,
  type SandboxRuntimeV2,
} from '@sigil/plugin-api';
import { pluginEntrySchema } from '../core/config/schema.ts';
import { openDatabase } from '../core/db/database.ts';
import { ProcessStdioTransport, type ProcessStdio } from '../core/mcp/process-transport.ts';
import { PluginHost } from '../core/plugins/host.ts';
import { builtinPlugins } from '../services/builtin-plugins.ts';
import { IMAGE_PATHS, startRegistry, testEngine, type TestRegistry } from '../test/support/docker.ts';
import { quietLogger, testCoreServices } from '../test/support/kernel.ts';
import { fixturePath } from '../test/support/paths.ts';
import { served, startPythonIndex } from '../test/support/python-index.ts';
import { wheelFromProject } from '../test/support/python-wheels.ts';
import { startVerdaccio } from '../test/support/verdaccio.ts';
import { plainProcess } from './proc.ts';
import { log, median, ms, quantile, rotated } from './stats.ts';

const COLD_ROUNDS = Number(process.env.BENCH_REGISTRY_COLD_STARTS ?? 15);
const WARM_ROUNDS = Number(process.env.BENCH_RUNS ?? 5);
const WARM_CALLS = Number(process.env.BENCH_REGISTRY_WARM_CALLS ?? 1000);
const WARM_WARMUP = Number(process.env.BENCH_REGISTRY_WARMUP ?? 300);

/** The targets: what the Docker engine and the syscall filter may add. */
const DOCKER_COLD_MS = 300;
const DOCKER_WARM_P50_MS = 0.2;
const FILTER_COLD_MS = 5;

export interface RegistryKindsMeasurement {
  scenario: string;
  concurrency: 1;
  /** Starts (or calls) per second at the median; 0 for differences. */
  rps: number;
  p50Ms: number;
  /** Cold rows: the 99th percentile of the starts, i.e. the slowest of a few tens. */
  p99Ms: number;
  /** The 10th percentile: on a loaded machine, the closest figure to the uncontended cost. */
  p10Ms?: number;
  target?: string;
  met?: boolean;
  /**
   * Cold rows: the first start, before the rounds and not among the samples (an image's first one
   * loads it into the engine from the registry's layout when the engine lacks it).
   */
  firstStartMs?: number;
  /** Warm rows: measured calls per block after `warmupCalls` on the same connection. */
  callsPerRun?: number;
  warmupCalls?: number;
  /** The host's 1-minute load average when the cold rounds began, when the warm ones began, and at the end. */
  loadAverage1m?: number[];
  /** The samples the row comes from: each start's ms (cold), or each block's p50 and p99 (warm). */
  runs?: number[] | { p50Ms: number; p99Ms: number; rps: number }[];
}

/** A started server: its stdio, and for an installed one how long the registry's install took. */
interface Started {
  stdio: ProcessStdio;
  installMs?: number;
}

/** One way of starting a server: its plain process, or installed from a registry into a sandbox. */
interface Way {
  /** What the rows call it, e.g. `sandbox-linux-namespaces`. */
  name: string;
  start(): Promise<Started>;
  /** Measured warm too; the sandbox without its filter is not (the filter's target is a cold start's). */
  warm: boolean;
  /** A way that needs the Docker engine: when its first start fails, its rows are left out. */
  optional?: boolean;
}

interface Target {
  maxMs: number;
  text: string;
}

/** A difference row: `mine` − `base`, paired by round. */
interface Comparison {
  name: string;
  mine: Way;
  base: Way;
  cold?: Target;
  warm?: Target;
}

/** One program as one registry kind delivers it. */
interface Server {
  /** The kind as the rows name it: npm, PyPI, OCI. */
  kind: string;
  /** What the plain process runs, for the rows. */
  program: string;
  /** The registry plugin, for the install rows. */
  registry: string;
  /** What a sandboxed way runs, for its rows. */
  delivery: string;
  /** The echo tool's answer to `bench`. */
  answer: string;
  plain: Way;
  sandboxed: Way[];
  comparisons: Comparison[];
}

const ECHO = { name: 'echo', arguments: { message: 'bench' } };

async function connect(stdio: ProcessStdio): Promise<Client> {
  const client = new Client({ name: 'bench-registry-kinds', version: '1.0.0' });
  try {
    await client.connect(new ProcessStdioTransport(stdio));
  } catch (error) {
    await (stdio as { kill?: () => Promise<void> }).kill?.();
    throw error;
  }
  return client;
}

async function echo(client: Client, answer: string): Promise<void> {
  const result = (await client.callTool(ECHO)) as CallToolResult;
  const text = JSON.stringify(result.content);
  if (result.isError || !text.includes(answer)) throw new Error(`echo answered ${text}, not ${answer}`);
}

/** One cold start to its first tools/call result; the server is stopped after (untimed). */
async function coldStart(way: Way, answer: string): Promise<{ ms: number; installMs?: number }> {
  const started = performance.now();
  const { stdio, installMs } = await way.start();
  const client = await connect(stdio);
  try {
    await echo(client, answer);
    return { ms: performance.now() - started, ...(installMs === undefined ? {} : { installMs }) };
  } finally {
    await client.close();
  }
}

/** `calls` echo calls one after another on `client`: their p50, p99 and rate. */
async function warmBlock(client: Client, answer: string, calls: number) {
  const times: number[] = [];
  const started = performance.now();
  for (let call = 0; call < calls; call++) {
    const sent = performance.now();
    await echo(client, answer);
    times.push(performance.now() - sent);
  }
  const elapsed = performance.now() - started;
  times.sort((a, b) => a - b);
  return {
    p50Ms: ms(quantile(times, 0.5)),
    p99Ms: ms(quantile(times, 0.99)),
    rps: Math.round((calls * 1000) / elapsed),
  };
}

/** Start to result: the plain process of a host launch, with this host's interpreter. */
function plainWay(launch: HostLaunch, python: string): Way {
  return {
    name: 'plain process',
    warm: true,
    start: async () => ({
      stdio: plainProcess(launch.runtime === 'python' ? python : process.execPath, launch.args, {
        cwd: launch.cwd ?? launch.root,
        env: { ...launch.env },
      }),
    }),
  };
}

/** The registry's install of a pinned package from its cache, then the sandbox's spawn of it. */
function installedWay(
  name: string,
  registry: PackageRegistryV2,
  pin: Awaited<ReturnType<PackageRegistryV2['resolve']>>,
  entryPoint: EntryPoint,
  sandbox: SandboxRuntimeV2,
  options: { warm?: boolean; optional?: boolean } = {},
): Way {
  return {
    name,
    warm: options.warm ?? true,
    ...(options.optional ? { optional: true } : {}),
    start: async () => {
      const started = performance.now();
      const { launch } = await registry.install(pin, entryPoint);
      const installMs = performance.now() - started;
      return { stdio: await sandbox.spawn({ launch, env: {}, networkAllowList: [] }), installMs };
    },
  };
}

/** Loaded and started plugins of a host of their own, as the gateway loads them. */
async function pluginsOf(
  db: Parameters<typeof testCoreServices>[0],
  baseDir: string,
  entries: { resolve: string; options: Record<string, unknown> }[],
): Promise<PluginHost> {
  const host = new PluginHost({
    builtins: builtinPlugins,
    core: testCoreServices(db),
    logger: quietLogger(),
    baseDir,
  });
  await host.load(entries.map((entry) => pluginEntrySchema.parse(entry)));
  await host.start();
  return host;
}

const reason = (error: unknown) => (error instanceof Error ? error.message : String(error));
const say = (line: string) => process.stderr.write(`registry-kinds: ${line}\n`);

function coldRow(
  scenario: string,
  samples: number[],
  extra: Partial<RegistryKindsMeasurement> = {},
): RegistryKindsMeasurement {
  const sorted = [...samples].sort((a, b) => a - b);
  const p50 = median(samples);
  const row: RegistryKindsMeasurement = {
    scenario,
    concurrency: 1,
    rps: Math.round(1000 / p50),
    p50Ms: ms(p50),
    p99Ms: ms(quantile(sorted, 0.99)),
    p10Ms: ms(quantile(sorted, 0.1)),
    ...extra,
    runs: samples.map(ms),
  };
  log(row);
  return row;
}

const verdict = (value: number, target: Target | undefined) =>
  target ? `; ${target.text}: ${value <= target.maxMs ? 'met' : 'not met'}` : '';

/** Paired differences of cold starts: their median, 10th and 99th percentiles. */
function coldDifference(scenario: string, mine: number[], base: number[], target?: Target) {
  const differences = mine.map((value, i) => value - (base[i] as number));
  const sorted = [...differences].sort((a, b) => a - b);
  const p50 = median(differences);
  const row: RegistryKindsMeasurement = {
    scenario: `${scenario}${verdict(p50, target)}`,
    concurrency: 1,
    rps: 0,
    p50Ms: ms(p50),
    p99Ms: ms(quantile(sorted, 0.99)),
    p10Ms: ms(quantile(sorted, 0.1)),
    ...(target ? { target: `p50 ≤ ${target.maxMs} ms`, met: p50 <= target.maxMs } : {}),
    runs: differences.map(ms),
  };
  log(row);
  return row;
}

type Block = Awaited<ReturnType<typeof warmBlock>>;

function warmRow(scenario: string, blocks: Block[]): RegistryKindsMeasurement {
  const row: RegistryKindsMeasurement = {
    scenario,
    concurrency: 1,
    rps: Math.round(median(blocks.map((b) => b.rps))),
    p50Ms: ms(median(blocks.map((b) => b.p50Ms))),
    p99Ms: ms(median(blocks.map((b) => b.p99Ms))),
    callsPerRun: WARM_CALLS,
    warmupCalls: WARM_WARMUP,
    runs: blocks,
  };
  log(row);
  return row;
}

/** Paired differences of a round's blocks: the median of the p50 differences, and of the p99 ones. */
function warmDifference(scenario: string, mine: Block[], base: Block[], target?: Target) {
  const paired = (pick: (block: Block) => number) =>
    median(mine.map((block, i) => pick(block) - pick(base[i] as Block)));
  const p50 = paired((b) => b.p50Ms);
  const row: RegistryKindsMeasurement = {
    scenario: `${scenario}${verdict(p50, target)}`,
    concurrency: 1,
    rps: 0,
    p50Ms: ms(p50),
    p99Ms: ms(paired((b) => b.p99Ms)),
    ...(target ? { target: `p50 ≤ ${target.maxMs} ms`, met: p50 <= target.maxMs } : {}),
  };
  log(row);
  return row;
}

/** What the suite measures for one server, in the order of its rows. */
function rowsOf(
  server: Server,
  cold: Map<Way, { ms: number[]; installMs: number[]; firstStartMs: number }>,
  warm: Map<Way, Block[]>,
): RegistryKindsMeasurement[] {
  const { kind } = server;
  const ways = [server.plain, ...server.sandboxed].filter((way) => cold.has(way));
  const rows: RegistryKindsMeasurement[] = [];
  const coldOf = (way: Way) => cold.get(way) as { ms: number[]; installMs: number[]; firstStartMs: number };
  for (const way of ways) {
    // The first sandboxed way says what runs; the others run the same.
    const what =
      way === server.plain
        ? `${server.program} → initialize → first tools/call result`
        : way === server.sandboxed[0]
          ? `${server.delivery}: ${server.registry} install from its cache → spawn → initialize → first tools/call result`
          : 'the same';
    rows.push(
      coldRow(`${kind} · cold, ${way.name}: ${what}`, coldOf(way).ms, {
        firstStartMs: ms(coldOf(way).firstStartMs),
      }),
    );
  }
  const installs = ways.flatMap((way) => coldOf(way).installMs);
  if (installs.length > 0)
    rows.push(
      coldRow(
        `${kind} · cold, of which ${server.registry}'s install from its cache (every sandboxed start)`,
        installs,
      ),
    );
  const comparisons = server.comparisons.filter(({ mine, base }) => cold.has(mine) && cold.has(base));
  for (const { name, mine, base, cold: target } of comparisons)
    rows.push(
      coldDifference(
        `${kind} · cold ${name} (median of paired differences)`,
        coldOf(mine).ms,
        coldOf(base).ms,
        target,
      ),
    );
  for (const way of ways.filter((w) => warm.has(w)))
    rows.push(warmRow(`${kind} · warm tools/call, ${way.name}`, warm.get(way) as Block[]));
  for (const { name, mine, base, warm: target } of comparisons)
    if (warm.has(mine) && warm.has(base))
      rows.push(
        warmDifference(
          `${kind} · warm ${name} (median of paired differences)`,
          warm.get(mine) as Block[],
          warm.get(base) as Block[],
          target,
        ),
      );
  return rows;
}

/** The Docker engine and a registry holding the python image, or why there are none. */
async function dockerParts(): Promise<
  { engine: Awaited<ReturnType<typeof testEngine>>; registry: TestRegistry; image: string } | string
> {
  let engine: Awaited<ReturnType<typeof testEngine>>;
  try {
    engine = await testEngine();
  } catch (error) {
    return `no Docker engine (test/support/docker.ts could not start one): ${reason(error)}`;
  }
  let registry: TestRegistry;
  try {
    registry = await startRegistry();
  } catch (error) {
    return `no docker-registry: ${reason(error)}`;
  }
  try {
    const pinned = await registry.pushAndForget(
      engine.docker,
      engine.images.python,
      'sigil-bench/python-echo',
    );
    return { engine, registry, image: pinned.slice(0, pinned.indexOf('@')) };
  } catch (error) {
    await registry.stop();
    return `pushing the python image to docker-registry failed: ${reason(error)}`;
  }
}

export async function registryKindsSuite(): Promise<RegistryKindsMeasurement[]> {
  // Not under /tmp: the namespace sandbox mounts a private /tmp over it, hiding the caches there.
  const work = mkdtempSync(join('/var/tmp', 'sigil-bench-registry-kinds-'));
  chmodSync(work, 0o755); // the sandbox users must reach the install roots
  const python = execFileSync(
    'python3',
    ['-I', '-c', 'import os, sys; print(os.path.realpath(sys.executable))'],
    {
      encoding: 'utf8',
    },
  ).trim();
  const db = await openDatabase({ url: ':memory:' });
  const hosts: PluginHost[] = [];
  const stops: (() => Promise<unknown>)[] = [];
  const plugins = async (entries: Parameters<typeof pluginsOf>[2]) => {
    const host = await pluginsOf(db, work, entries);
    hosts.push(host);
    return host;
  };
  try {
    const npmRegistry = await startVerdaccio({
      packages: [
        { dir: fixturePath('mcp', 'echo-format-package') },
        { dir: fixturePath('mcp', 'node-echo-server') },
      ],
      uplink: false,
    });
    stops.push(() => npmRegistry.stop());
    const pythonFixtures = fixturePath('python');
    const [serverWheel, formatWheel] = await Promise.all([
      wheelFromProject(join(pythonFixtures, 'sigil-echo-server')),
      wheelFromProject(join(pythonFixtures, 'sigil-echo-format')),
    ]);
    const pythonIndex = await startPythonIndex({
      projects: { 'sigil-echo-server': [served(serverWheel)], 'sigil-echo-format': [served(formatWheel)] },
    });
    stops.push(() => pythonIndex.stop());
    const docker = await dockerParts();
    if (typeof docker === 'string') say(`the OCI rows are left out: ${docker}`);
    else stops.push(() => docker.registry.stop());

    const registries = (
      await plugins([
        { resolve: 'registry-npm', options: { registry: npmRegistry.url, cacheDir: join(work, 'npm') } },
        { resolve: 'registry-pypi', options: { index: pythonIndex.url, cacheDir: join(work, 'pypi') } },
        ...(typeof docker === 'string'
          ? []
          : [
              {
                resolve: 'registry-oci',
                options: { registry: `http://${docker.registry.host}`, cacheDir: join(work, 'oci') },
              },
            ]),
      ])
    ).extensions(extensionPoints.registryKinds);
    const sandbox = async (resolve: string, options: Record<string, unknown>) =>
      (await plugins([{ resolve, options }])).one('sandbox-runtime');
    const namespaces = (syscallFilter: 'seccomp' | 'off') =>
      sandbox('sandbox-linux-namespaces', {
        stateDir: join(work, `sandboxes-${syscallFilter}`),
        syscallFilter,
      });
    const [filtered, unfiltered] = [await namespaces('seccomp'), await namespaces('off')];

    /** The registry of `kind`, its pin of `spec` and the plain process of what it installs. */
    const installed = async (kind: string, spec: PackageSpec, entryPoint: EntryPoint) => {
      const registry = registries.get(kind) as PackageRegistryV2;
      const pin = await registry.resolve(spec);
      const { launch } = await registry.install(pin, entryPoint);
      return { registry, pin, launch };
    };
    /** A host program's server: plain, in the namespace sandbox, and in it without the filter. */
    const hostServer = async (
      kind: string,
      spec: PackageSpec,
      entryPoint: EntryPoint,
      text: Pick<Server, 'kind' | 'program' | 'registry' | 'delivery' | 'answer'>,
    ): Promise<Server> => {
      const { registry, pin, launch } = await installed(kind, spec, entryPoint);
      if (launch.kind !== 'host') throw new Error(`${kind} answered an image launch`);
      const plain = plainWay(launch, python);
      const sandboxed = installedWay('sandbox-linux-namespaces', registry, pin, entryPoint, filtered);
      const bare = installedWay(
        'sandbox-linux-namespaces without the syscall filter',
        registry,
        pin,
        entryPoint,
        unfiltered,
        { warm: false },
      );
      return {
        ...text,
        plain,
        sandboxed: [sandboxed, bare],
        comparisons: [
          { name: 'overhead: sandbox-linux-namespaces − plain process', mine: sandboxed, base: plain },
          {
            name: 'syscall filter: sandbox-linux-namespaces − the same without the filter',
            mine: sandboxed,
            base: bare,
            cold: { maxMs: FILTER_COLD_MS, text: `target ≤ ${FILTER_COLD_MS} ms` },
          },
        ],
      };
    };
    const servers: Server[] = [
      await hostServer(
        'npm',
        { name: 'sigil-test-node-echo-server', range: '^1.0.0' },
        { bin: 'sigil-node-echo', args: [] },
        {
          kind: 'npm',
          program:
            'node, sigil-test-node-echo-server 1.0.0 (test/fixtures/mcp/node-echo-server) as registry-npm installed it',
          registry: 'registry-npm',
          delivery: 'the same package from verdaccio',
          answer: 'node says: bench',
        },
      ),
      await hostServer(
        'pypi',
        { name: 'sigil-echo-server', range: '1.0.0' },
        { bin: 'sigil-echo-server', args: [] },
        {
          kind: 'PyPI',
          program: 'python3, sigil-echo-server 1.0.0 (test/fixtures/python) as registry-pypi installed it',
          registry: 'registry-pypi',
          delivery: 'the same wheels from a local PEP 691 index',
          answer: 'echo: bench',
        },
      ),
    ];
    if (typeof docker !== 'string') {
      const entryPoint: EntryPoint = { bin: 'python3', args: [IMAGE_PATHS.pythonServer] };
      const { registry, pin } = await installed('oci', { name: docker.image, range: 'pushed' }, entryPoint);
      const serverFile = fixturePath('mcp', 'python-echo', 'server.py');
      const plain = plainWay(
        { kind: 'host', runtime: 'python', root: dirname(serverFile), args: [serverFile] },
        python,
      );
      const engine = { socketPath: docker.engine.socketPath };
      const container = async (runtime: 'runc' | 'runsc', name: string) =>
        installedWay(
          name,
          registry,
          pin,
          entryPoint,
          await sandbox('sandbox-docker', {
            engine,
            images: docker.engine.images,
            runtime,
            stateDir: '/tmp/sigil-bench-docker',
          }),
          { optional: true },
        );
      const runc = await container('runc', 'sandbox-docker, runc (stdio through pipes)');
      const runsc = await container('runsc', 'sandbox-docker, runsc (gVisor; stdio through the attach)');
      const docker300 = { maxMs: DOCKER_COLD_MS, text: `target: Docker adds ≤ ${DOCKER_COLD_MS} ms` };
      const dockerWarm = {
        maxMs: DOCKER_WARM_P50_MS,
        text: `target: Docker adds ≤ ${DOCKER_WARM_P50_MS} ms p50`,
      };
      servers.push({
        kind: 'OCI',
        program: 'python3, test/fixtures/mcp/python-echo/server.py',
        registry: 'registry-oci',
        delivery:
          'the test image sigil-test/python (this python3, the same server.py) from docker-registry, by digest',
        answer: 'bench',
        plain,
        sandboxed: [runc, runsc],
        comparisons: [runc, runsc].map((mine) => ({
          name: `overhead: ${mine.name.replace(/ \(.*\)$/, '')} − plain process`,
          mine,
          base: plain,
          cold: docker300,
          warm: dockerWarm,
        })),
      });
    }

    // First starts, untimed for the rows: the page cache, the image loaded into the engine from the
    // registry's layout, the sandbox's first-use lookups. A Docker way that cannot start is left out.
    const cold = new Map<Way, { ms: number[]; installMs: number[]; firstStartMs: number }>();
    for (const server of servers)
      for (const way of [server.plain, ...server.sandboxed]) {
        try {
          const first = await coldStart(way, server.answer);
          cold.set(way, { ms: [], installMs: [], firstStartMs: first.ms });
        } catch (error) {
          if (!way.optional) throw error;
          say(`the rows of ${server.kind} · ${way.name} are left out: it did not start (${reason(error)})`);
        }
      }
    const hostLoad = [Number((loadavg()[0] ?? 0).toFixed(2))];
    const startable = servers.flatMap((server) =>
      [server.plain, ...server.sandboxed].filter((way) => cold.has(way)).map((way) => ({ server, way })),
    );
    for (let round = 0; round < COLD_ROUNDS; round++)
      for (const { server, way } of rotated(startable, round)) {
        const start = await coldStart(way, server.answer);
        const samples = cold.get(way) as { ms: number[]; installMs: number[] };
        samples.ms.push(start.ms);
        if (start.installMs !== undefined) samples.installMs.push(start.installMs);
      }

    hostLoad.push(Number((loadavg()[0] ?? 0).toFixed(2)));
    const warm = new Map<Way, Block[]>();
    const live = [];
    try {
      for (const { server, way } of startable.filter(({ way }) => way.warm)) {
        const client = await connect((await way.start()).stdio);
        live.push({ server, way, client });
        await warmBlock(client, server.answer, WARM_WARMUP);
        warm.set(way, []);
      }
      for (let round = 0; round < WARM_ROUNDS; round++)
        for (const { server, way, client } of rotated(live, round))
          (warm.get(way) as Block[]).push(await warmBlock(client, server.answer, WARM_CALLS));
    } finally {
      await Promise.all(live.map(({ client }) => client.close()));
    }
    hostLoad.push(Number((loadavg()[0] ?? 0).toFixed(2)));
    return servers
      .flatMap((server) => rowsOf(server, cold, warm))
      .map((row) => ({ ...row, loadAverage1m: hostLoad }));
  } finally {
    for (const host of hosts.reverse()) await host.stop();
    for (const stop of stops.reverse()) await stop();
    await db.destroy();
    rmSync(work, { recursive: true, force: true });
  }
}
