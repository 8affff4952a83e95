/**
 * `canvas`: what the runtime's canvas executor costs per node, and how soon a run goes on once its
 * owner approves, each against the database floor of the same rows measured in the same run.
 *
 * One process holds everything: a runtime served as `sigil up` serves it (bench/canvas-world.ts: a
 * real kernel, quiet logs) with the bench node kinds of bench/fixtures/canvas (`noop`: does nothing
 * and logs nothing; `approval`), one signed-in wallet, and the client (fetch, the SSE stream read as
 * it arrives). SQLite (a fresh file: the default database), then PostgreSQL (a fresh schema in
 * BENCH_DATABASE_URL, else TEST_DATABASE_URL, else a local `test` database; left out with a note
 * when unreachable, or when BENCH_CANVAS_DATABASES=sqlite).
 *
 * - chain: `n1 → n2 → … → n1000` of noop nodes; fan-out: one source and 999 nodes fed by it alone,
 *   at the default maxParallelNodes (4) and (SQLite) at the highest allowed (64, a runtime of its
 *   own). A run is timed from `POST /canvas/workflows/execute/stream` to its `run.ended` event read;
 *   per node is that ÷ 1000 (target ≤ 1 ms, the node's stored events included). p50/p99 are of the
 *   steps between successive `node.status succeeded` events (the first from the POST); req/s is
 *   nodes per second.
 * - approvals: `start → approve1 → after1 → … → after100`; each step is from the decision's `POST
 *   /canvas/runs/:id/nodes/:nodeId/decision` (sent as `approval.required` is read) to the next node's
 *   `node.status running` read on the stream (target ≤ 20 ms).
 * - floors (bench/canvas-floor.ts): what the design must write at the least, on the runtime's
 *   connection, with no executor: every node's changes made at once through RunStore, so one group
 *   commit writes them (the `added` rows are the executor's run less this); the same rows in the
 *   same statements in one transaction without RunStore (the database's share); a decision's
 *   changes through RunStore in the executor's 2 transactions.
 *
 * BENCH_RUNS rounds (1), the scenarios in a turning order; rows are medians over rounds, the `added`
 * rows medians of the paired per-round differences. BENCH_CANVAS_NODES (1000), BENCH_CANVAS_APPROVALS
 * (100) decisions a run. "server CPU" is this whole process's CPU per node or decision (runtime,
 * SQLite's threads, client); the JSON adds the main thread's alone, the statements and commits per
 * step and the machine's load. BENCH_CPU_PROFILE=<dir> writes a CPU profile of each measured run
 * (BENCH_CPU_PROFILE_INTERVAL_US: its sampling interval).
 */
import { loadavg } from 'node:os';
import { describeUrl } from '../core/db/database.ts';
import {
  approvalNodeIds,
  approvalsRun,
  chain,
  fanOut,
  floorRun,
  nodeIds,
  nodesRun,
  type Timed,
} from './canvas-runs.ts';
import { openCanvasWorld, type CanvasWorld, type WorldDatabase } from './canvas-world.ts';
import { POSTGRES_URL, postgresReachable } from './postgres.ts';
import { mainThreadCpuUs, ownCpuUs, profiled } from './proc.ts';
import { counted, log, median, ms, pairedMedian, quantile, rotated, type BenchRow } from './stats.ts';

const RUNS = Number(process.env.BENCH_RUNS ?? 1);
const NODES = Number(process.env.BENCH_CANVAS_NODES ?? 1000);
const APPROVALS = Number(process.env.BENCH_CANVAS_APPROVALS ?? 100);
const DATABASES = (process.env.BENCH_CANVAS_DATABASES ?? 'sqlite,postgres').split(',');
/** The wide fan-out's maxParallelNodes: the highest the runtime allows. */
const WIDE = 64;
const TARGET_NODE_MS = 1;
const TARGET_APPROVAL_MS = 20;

export interface CanvasMeasurement extends BenchRow {
  target?: string;
  met?: boolean;
  runs?: Sample[];
}

/** One round of a scenario. */
interface Sample {
  /** From the start (the POST, or the first write) to the end (`run.ended` read, the last commit). */
  totalMs: number;
  /** totalMs ÷ steps: per node, or per decision. */
  meanMs: number;
  p50Ms: number;
  p99Ms: number;
  cpuUsPerStep: number;
  mainThreadCpuUsPerStep: number;
  statementsPerStep: number;
  commitsPerStep: number;
  loadAverage1m: number;
}

type ScenarioKey =
  'floor-nodes' | 'floor-nodes-knex' | 'chain' | 'fan-out' | 'fan-out-wide' | 'floor-approvals' | 'approvals';

interface Scenario {
  key: ScenarioKey;
  world: CanvasWorld;
  run(): Promise<Timed>;
}

/**
 * What one database's worlds measure: the floors, the chain, the default fan-out and the approvals;
 * on SQLite the wide fan-out too (a `wide` world).
 */
function scenarios(world: CanvasWorld, wide: CanvasWorld | undefined): Scenario[] {
  const ids = nodeIds(NODES);
  const all: (Scenario | false)[] = [
    { key: 'floor-nodes', world, run: () => floorRun(world, ids, NODES, NODES, (run) => run.nodes(ids)) },
    {
      key: 'floor-nodes-knex',
      world,
      run: () => floorRun(world, ids, NODES, NODES, (run) => run.knexNodes(ids)),
    },
    { key: 'chain', world, run: () => nodesRun(world, chain(NODES)) },
    { key: 'fan-out', world, run: () => nodesRun(world, fanOut(NODES)) },
    wide !== undefined && { key: 'fan-out-wide', world: wide, run: () => nodesRun(wide, fanOut(NODES)) },
    {
      key: 'floor-approvals',
      world,
      run: () =>
        floorRun(world, approvalNodeIds(APPROVALS), APPROVALS, 1, (run, i) =>
          run.decision(`approve${i}`, `after${i}`, i < APPROVALS ? `approve${i + 1}` : undefined),
        ),
    },
    { key: 'approvals', world, run: () => approvalsRun(world, APPROVALS) },
  ];
  return all.filter((scenario) => scenario !== false);
}

async function measure(scenario: Scenario, name: string): Promise<Sample> {
  const cpu = ownCpuUs();
  const mainCpu = mainThreadCpuUs();
  const { result, statements, commits } = await counted(scenario.world.kernel.db, () =>
    profiled(name, () => scenario.run()),
  );
  const steps = result.stepsMs.length;
  const sorted = [...result.stepsMs].sort((a, b) => a - b);
  return {
    totalMs: ms(result.totalMs),
    meanMs: ms(result.totalMs / steps),
    p50Ms: ms(quantile(sorted, 0.5)),
    p99Ms: ms(quantile(sorted, 0.99)),
    cpuUsPerStep: Math.round((ownCpuUs() - cpu) / steps),
    mainThreadCpuUsPerStep: Math.round((mainThreadCpuUs() - mainCpu) / steps),
    statementsPerStep: Number((statements / steps).toFixed(2)),
    commitsPerStep: Number((commits / steps).toFixed(2)),
    loadAverage1m: Number((loadavg()[0] ?? 0).toFixed(2)),
  };
}

/** Every scenario of one database, BENCH_RUNS rounds; its rows. */
async function databaseRows(database: WorldDatabase): Promise<CanvasMeasurement[]> {
  const maxNodes = Math.max(NODES, 2 * APPROVALS + 1);
  const world = await openCanvasWorld({ maxNodes }, database);
  const wide =
    database.name === 'sqlite'
      ? await openCanvasWorld({ maxNodes, maxParallelNodes: WIDE }, database).catch(async (err: unknown) => {
          await world.close();
          throw err;
        })
      : undefined;
  try {
    // The node kinds' first loads, each runtime's first workspace and V8's optimizing compiler
    // (which took a first measured run to twice the CPU of the next ones), outside the timing.
    for (const each of [world, wide])
      if (each) for (const document of [chain(NODES), fanOut(NODES)]) await nodesRun(each, document);
    await approvalsRun(world, Math.min(APPROVALS, 20));
    const samples = new Map<ScenarioKey, Sample[]>();
    const measured = scenarios(world, wide);
    for (let round = 0; round < RUNS; round++)
      for (const scenario of rotated(measured, round)) {
        const sample = await measure(scenario, `canvas-${database.name}-${scenario.key}-${round}`);
        samples.set(scenario.key, [...(samples.get(scenario.key) ?? []), sample]);
        log({ database: database.name, round, scenario: scenario.key, ...sample });
      }
    return rows(database.name, samples);
  } finally {
    await Promise.all([world.close(), wide?.close()]);
  }
}

export async function canvasSuite(): Promise<CanvasMeasurement[]> {
  const measurements = await databaseRows({ name: 'sqlite' });
  if (!DATABASES.includes('postgres')) return measurements;
  if (await postgresReachable())
    measurements.push(...(await databaseRows({ name: 'postgres', url: POSTGRES_URL })));
  else
    process.stdout.write(
      `canvas bench: PostgreSQL not reachable at ${describeUrl(POSTGRES_URL)}; SQLite only\n`,
    );
  return measurements;
}

const verdict = (met: boolean) => (met ? 'met' : 'not met');

/** The table's rows of one database: the scenarios it measured, each with its floor and what is added to it. */
function rows(database: string, samples: Map<ScenarioKey, Sample[]>): CanvasMeasurement[] {
  const of = (key: ScenarioKey) => samples.get(key) ?? [];
  const medianOf = (key: ScenarioKey, pick: (sample: Sample) => number) => median(of(key).map(pick));
  const row = (key: ScenarioKey, scenario: string, concurrency = 1): CanvasMeasurement[] =>
    of(key).length === 0
      ? []
      : [
          {
            scenario: `${database} · ${scenario}`,
            concurrency,
            rps: Math.round(1000 / medianOf(key, (s) => s.meanMs)),
            p50Ms: ms(medianOf(key, (s) => s.p50Ms)),
            p99Ms: ms(medianOf(key, (s) => s.p99Ms)),
            serverCpuUsPerRequest: Math.round(medianOf(key, (s) => s.cpuUsPerStep)),
            runs: of(key),
          },
        ];
  /** Per node: POST to run.ended ÷ nodes, against the target. */
  const perNode = (key: ScenarioKey, what: string, concurrency: number): CanvasMeasurement[] => {
    const mean = ms(medianOf(key, (s) => s.meanMs));
    const met = mean <= TARGET_NODE_MS;
    return row(
      key,
      `executor: ${what}; POST to run.ended ÷ ${NODES} = ${mean} ms a node, target ≤ ${TARGET_NODE_MS} ms: ${verdict(met)}`,
      concurrency,
    ).map((measured) => ({
      ...measured,
      target: `≤ ${TARGET_NODE_MS} ms a node (POST to run.ended ÷ ${NODES})`,
      met,
    }));
  };
  /** The executor's samples less its floor's, round by round; `meanAsP50` puts the mean in the p50 column. */
  const added = (key: ScenarioKey, floor: ScenarioKey, scenario: string, meanAsP50: boolean) => {
    const executor = of(key);
    const floors = of(floor);
    if (executor.length === 0 || floors.length !== executor.length) return [];
    const paired = (pick: (sample: Sample) => number) => pairedMedian(executor, floors, pick);
    return [
      {
        scenario: `${database} · ${scenario}`,
        concurrency: 1,
        rps: 0,
        p50Ms: ms(paired(meanAsP50 ? (s) => s.meanMs : (s) => s.p50Ms)),
        p99Ms: ms(paired((s) => s.p99Ms)),
        serverCpuUsPerRequest: Math.round(paired((s) => s.cpuUsPerStep)),
      },
    ];
  };
  const approvalP50 = ms(medianOf('approvals', (s) => s.p50Ms));
  const approvalMet = approvalP50 <= TARGET_APPROVAL_MS;
  return [
    ...row(
      'floor-nodes',
      `floor: every node's changes through RunStore at once, one group commit (a transaction; each node's row once and its 3 events), ${NODES} nodes, no executor`,
    ),
    ...row(
      'floor-nodes-knex',
      "floor: the same rows and events in RunStore's statements in one transaction, through knex, without RunStore",
    ),
    ...perNode('chain', `${NODES}-node chain of no-op nodes`, 1),
    ...perNode('fan-out', `1 source + ${NODES - 1} independent no-op nodes, maxParallelNodes 4 (default)`, 4),
    ...perNode('fan-out-wide', `the same fan-out, maxParallelNodes ${WIDE}`, WIDE),
    ...added(
      'chain',
      'floor-nodes',
      `added by the executor a node (chain − RunStore floor; p50 column: POST to run.ended ÷ ${NODES}, paired)`,
      true,
    ),
    ...added(
      'fan-out',
      'floor-nodes',
      `added by the executor a node (fan-out − RunStore floor; p50 column: POST to run.ended ÷ ${NODES}, paired)`,
      true,
    ),
    ...row(
      'floor-approvals',
      "floor: a decision's changes through RunStore in the executor's 2 transactions (the decision, the run's status, the approval node's start; its success, the next node's start and end, the next approval's request), no executor",
    ),
    ...row(
      'approvals',
      `executor: approval POST …/decision → the next node's node.status running read on the stream; target ≤ ${TARGET_APPROVAL_MS} ms p50: ${verdict(approvalMet)}`,
    ).map((measured) => ({
      ...measured,
      target: `≤ ${TARGET_APPROVAL_MS} ms p50 from the decision's POST to the next node's start`,
      met: approvalMet,
    })),
    ...added(
      'approvals',
      'floor-approvals',
      'added by the executor to a decision (approvals − floor, paired)',
      false,
    ),
  ];
}
