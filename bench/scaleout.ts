/**
 * `scale-out`: tool calls through nginx with one and with two replicas of each service, on this
 * machine, in one run (issue 29). The replica set of the scale-out tests (test/support/replicas.ts):
 * real `sigil runtime` and `sigil gateway` processes (through tsx, as the tests run them) on one fresh
 * PostgreSQL database, behind nginx with the shipped configuration (deploy/nginx, one worker process),
 * the probe MCP server from a local verdaccio in the linux-namespaces sandbox, paying on anvil.
 *
 * Two sets, one after the other: the gateways with the dev chain's x402 rail (every call paid by the
 * dev payer, each gateway settling from an account of the facilitator's list it leases), and without a
 * rail (calls free).
 * In each, BENCH_RUNS rounds (2) of both sizes, their order turned each round: one replica of each
 * service (the second ones stopped, nginx reloaded with the first ones only) and two (the second ones
 * started again, nginx reloaded with all). Each measurement is bench/payments-load.ts in its own
 * process, BENCH_SCALEOUT_CONCURRENCY (32) calls in flight for BENCH_SCALEOUT_SECONDS (20) after
 * a warmup, `POST /api/servers/probe/tools/echo` at the balancer (no affinity header: nginx spreads
 * the calls by request id). Rows are medians over rounds; "server CPU" is the gateway replicas' CPU,
 * their MCP servers' included, per call.
 *
 * After the paid runs the books are checked as the scale-out proof checks them (test/scaleout/books.ts):
 * every paid 200 settled, nothing charged twice, payer and treasury against the records, and the
 * reconciler finds nothing; the suite fails otherwise.
 */
import { execFile } from 'node:child_process';
import { loadavg } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { walletToken } from '../test/services/gateway/support.ts';
import { balances } from '../test/services/gateway/payments/support.ts';
import { whenQuiet, x402Books } from '../test/scaleout/books.ts';
import { startReplicas, type ReplicaProcess, type ReplicaSet } from '../test/support/replicas.ts';
import type { PaymentsLoadOptions, PaymentsLoadResult } from './payments-load.ts';
import { POSTGRES_URL, postgresReachable } from './postgres.ts';
import { descendants, processCpuUs } from './proc.ts';
import { log, median, ms, type BenchRow } from './stats.ts';

const here = dirname(fileURLToPath(import.meta.url));
const execFileAsync = promisify(execFile);

const RUNS = Number(process.env.BENCH_RUNS ?? 2);
const CONCURRENCY = Number(process.env.BENCH_SCALEOUT_CONCURRENCY ?? 32);
const SECONDS = Number(process.env.BENCH_SCALEOUT_SECONDS ?? 20);
/** Unmeasured calls before each window; a paid one's rate sizes its pre-signed payments. */
const WARMUP = Number(process.env.BENCH_SCALEOUT_WARMUP ?? 200);
const SIZES = [1, 2] as const;
type Size = (typeof SIZES)[number];

const callBody = JSON.stringify({ arguments: { message: 'bench' } });

interface Run {
  rps: number;
  p50Ms: number;
  p99Ms: number;
  calls: number;
  errors: Record<string, number>;
  gatewayCpuUs: number;
  /** The host's 1-minute load average at the end of the run: other work on the machine skews it all. */
  hostLoad: number;
}

/** What a row measured, and what else its JSON keeps. */
type Measured = Omit<BenchRow, 'scenario' | 'concurrency'> & { [extra: string]: unknown };
type ScaleOutRow = BenchRow & Measured;

export async function scaleOutSuite(): Promise<ScaleOutRow[]> {
  if (!(await postgresReachable()))
    throw new Error(`scale-out bench: replicas share PostgreSQL, and none answers at ${POSTGRES_URL}`);
  const rows: ScaleOutRow[] = [];
  for (const paid of [true, false]) rows.push(...(await measureSet(paid)));
  return rows;
}

/** One replica set (paid or free): the rounds of both sizes, their rows, and the books when paid. */
async function measureSet(paid: boolean): Promise<ScaleOutRow[]> {
  const operator = privateKeyToAccount(generatePrivateKey());
  const set = await startReplicas({
    postgresUrl: POSTGRES_URL,
    payments: paid,
    // The load is one client, its calls anonymous (x402 pays them): its limit is lifted.
    settings: {
      gateway: { operatorWallets: [operator.address], callLimits: { perAnonymousClient: 100_000 } },
    },
  });
  const what = paid ? 'paid' : 'free';
  try {
    const payer = set.chain.accounts.payer.address;
    const treasury = set.chain.accounts.treasury.address;
    const balanceOf = balances(set.chain);
    const before = { payer: await balanceOf(payer), treasury: await balanceOf(treasury) };
    const runs: Record<Size, Run[]> = { 1: [], 2: [] };
    const nonces = { ok: [] as string[], refused: [] as string[] };
    for (let round = 0; round < RUNS; round++) {
      for (const size of round % 2 === 0 ? SIZES : [...SIZES].reverse()) {
        await serveWith(set, size);
        const { run, result } = await load(set, paid);
        runs[size].push(run);
        nonces.ok.push(...(result.paid?.ok ?? []));
        nonces.refused.push(...(result.paid?.refused ?? []));
      }
    }
    const rows = SIZES.map((size) =>
      summarize(
        `${what}: POST /api/servers/probe/tools/echo through nginx, ${size} replica${size === 1 ? '' : 's'} of each service`,
        runs[size],
      ),
    );
    const [one, two] = rows as [ScaleOutRow, ScaleOutRow];
    rows.push(
      row(
        `${what}: 2 replicas of each service ÷ 1: ${Math.round((two.rps / one.rps) * 100)} % of its req/s`,
        {
          rps: two.rps,
          p50Ms: ms(two.p50Ms - one.p50Ms),
          p99Ms: ms(two.p99Ms - one.p99Ms),
        },
      ),
    );
    if (paid) rows.push(await exactlyOnce(set, operator, before, nonces));
    return rows;
  } finally {
    await set.stop();
  }
}

/** The first `size` replicas of each service running, the others stopped, and nginx in front of those. */
async function serveWith(set: ReplicaSet, size: Size): Promise<void> {
  for (const replicas of [set.runtimes, set.gateways])
    for (const [index, replica] of replicas.entries()) {
      if (index < size && !replica.running) await set.restart(replica);
      if (index >= size && replica.running) await replica.stop();
    }
  const running = (replicas: ReplicaProcess[]) =>
    replicas.filter((replica) => replica.running).map((replica) => replica.address);
  await set.balancer.reload({ runtime: running(set.runtimes), gateway: running(set.gateways) });
}

/** CPU (µs) the running gateway replicas and their MCP servers have used so far. */
function gatewaysCpuUs(set: ReplicaSet): number {
  let total = 0;
  for (const gateway of set.gateways) {
    if (!gateway.running || gateway.pid === undefined) continue;
    total += processCpuUs(gateway.pid);
    for (const cpu of descendants(gateway.pid).values()) total += cpu;
  }
  return total;
}

/** One measured window at the balancer from bench/payments-load.ts (paid as the dev payer). */
async function load(set: ReplicaSet, paid: boolean): Promise<{ run: Run; result: PaymentsLoadResult }> {
  const options: PaymentsLoadOptions = {
    url: `${set.gatewayUrl}/api/servers/probe/tools/echo`,
    body: callBody,
    expect: 'bench',
    concurrency: CONCURRENCY,
    warmup: WARMUP,
    seconds: SECONDS,
    ...(paid
      ? {
          payment: {
            payerKey: set.chain.accounts.payer.privateKey,
            network: `eip155:${set.chain.chainId}`,
            asset: set.chain.token.address,
          },
        }
      : {}),
  };
  const cpuBefore = gatewaysCpuUs(set);
  const { stdout } = await execFileAsync(
    process.execPath,
    ['--import', 'tsx', join(here, 'payments-load.ts'), JSON.stringify(options)],
    { maxBuffer: 256 * 1024 * 1024 },
  );
  const result = JSON.parse(stdout) as PaymentsLoadResult;
  const run: Run = {
    rps: result.rps,
    p50Ms: result.p50,
    p99Ms: result.p99,
    calls: result.calls,
    errors: result.errors,
    gatewayCpuUs: (gatewaysCpuUs(set) - cpuBefore) / Math.max(1, result.calls),
    hostLoad: loadavg()[0] ?? 0,
  };
  if (Object.keys(result.errors).length > 0)
    throw new Error(`scale-out bench: ${JSON.stringify(result.errors)}; first: ${result.firstError ?? ''}`);
  return { run, result };
}

function summarize(scenario: string, runs: Run[]): ScaleOutRow {
  return row(scenario, {
    rps: Math.round(median(runs.map((run) => run.rps))),
    p50Ms: ms(median(runs.map((run) => run.p50Ms))),
    p99Ms: ms(median(runs.map((run) => run.p99Ms))),
    serverCpuUsPerRequest: Math.round(median(runs.map((run) => run.gatewayCpuUs))),
    seconds: SECONDS,
    warmupCalls: WARMUP,
    runs: runs.map((run) => ({
      ...run,
      rps: Math.round(run.rps),
      p50Ms: ms(run.p50Ms),
      p99Ms: ms(run.p99Ms),
      gatewayCpuUs: Math.round(run.gatewayCpuUs),
      hostLoad: Number(run.hostLoad.toFixed(2)),
    })),
  });
}

function row(scenario: string, values: Measured): ScaleOutRow {
  const measured: ScaleOutRow = { scenario, concurrency: CONCURRENCY, ...values };
  log(measured);
  return measured;
}

/** The paid set's books after its runs (as the scale-out proof reads them); throws on any break. */
async function exactlyOnce(
  set: ReplicaSet,
  operator: ReturnType<typeof privateKeyToAccount>,
  before: { payer: bigint; treasury: bigint },
  nonces: { ok: string[]; refused: string[] },
): Promise<ScaleOutRow> {
  const books = await whenQuiet('the books balanced', () =>
    x402Books({
      chain: set.chain,
      db: set.db,
      treasury: { address: set.chain.accounts.treasury.address, before: before.treasury },
      payers: [{ address: set.chain.accounts.payer.address, before: before.payer }],
      calls: [
        ...nonces.ok.map((nonce) => ({ label: nonce, nonces: [nonce.toLowerCase()], answered: true })),
        ...nonces.refused.map((nonce) => ({ label: nonce, nonces: [nonce.toLowerCase()], answered: false })),
      ],
      sweptToTreasury: 0n,
    }),
  );
  const { token } = await walletToken(set.gatewayUrl, operator);
  const response = await fetch(`${set.gatewayUrl}/api/payments/reconciliation`, {
    headers: { authorization: `Bearer ${token}` },
  });
  const report = (await response.json()) as { mismatches?: unknown[] };
  const problems = [...books.problems];
  if (response.status !== 200 || report.mismatches?.length !== 0)
    problems.push(`the reconciliation answered ${response.status}: ${JSON.stringify(report)}`);
  const checked = row(
    `paid: exactly once across the gateway replicas: ${nonces.ok.length} paid 200s, ${books.settled} settled records, ${books.events} AuthorizationUsed, the treasury +${books.treasuryGain}; 0 double charges, 0 lost settlements, the reconciler found nothing`,
    { rps: 0, p50Ms: 0, p99Ms: 0, met: problems.length === 0, problems },
  );
  if (problems.length > 0)
    throw new Error(`scale-out bench: the books do not balance: ${problems.join('; ')}`);
  return checked;
}
