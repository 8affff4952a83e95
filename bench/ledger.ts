/**
 * `ledger`: charges per second of the runtime's wallet ledger, on SQLite and on PostgreSQL, with the
 * invariant checked at the end.
 *
 * Each database gets a fresh kernel (SQLite: a file under the OS temp dir, WAL; PostgreSQL: a schema
 * of its own in BENCH_DATABASE_URL, else TEST_DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test,
 * skipped with a note when unreachable) and calls `Ledger.charge` in this process, BENCH_LEDGER_CONCURRENCY
 * (50) in flight, BENCH_LEDGER_CHARGES (4000) charges of 1000 base units per scenario, every agent with
 * a daily, weekly and monthly budget (so every charge sums its windows):
 *
 * - hot wallet: one wallet, one agent; the wallet holds enough for 90 % of the charges, so the last
 *   tenth is refused for the available balance under full contention on one row lock;
 * - many wallets: 200 wallets of one agent each, charges spread at random, each wallet funded for
 *   everything;
 *
 * each twice: charges made one transaction each (`chargeOnce`, the baseline) and through
 * `Ledger.charge`'s group commit, taking turns for BENCH_RUNS runs (3). A row holds the medians of its
 * runs and names their range; a third row per scenario is group commit ÷ the baseline, paired by run.
 * On SQLite a third way takes its turn too: one transaction a charge through knex's own SQLite client,
 * which prepares every statement afresh (the baseline of the kernel's client, which keeps them:
 * core/db/sqlite-statements.ts), and a row of the kernel's ÷ knex's own, paired by run.
 *
 * At the end of each scenario the suite fails unless exactly the expected charges succeeded, every
 * wallet's available = onChainBalance − unsettledSpend − pendingWithdrawals ≥ 0, unsettled spend equals
 * 1000 × its successful charges, no budget window is over its limit, and the running totals equal the
 * SQL sums of the entries (`Ledger.audit`). "req/s" in the table is charges per second; "server CPU" is
 * this process's CPU per charge (the database server's own CPU is not counted for PostgreSQL).
 */
import { loadavg } from 'node:os';
import { performance } from 'node:perf_hooks';
import knex from 'knex';
import { getAddress } from 'viem';
import { randomBytes } from 'node:crypto';
import { ManualClock } from '../core/clock.ts';
import { SqliteClientWithPreparedStatements } from '../core/db/sqlite-statements.ts';
import { createLedgerService, type LedgerService } from '../services/runtime/ledger/service.ts';
import { chargeInput, chargeOnce } from '../services/runtime/ledger/charges.ts';
import { SpendRefused } from '../services/runtime/ledger/errors.ts';
import { openTestKernel, TEST_DATABASES, type TestDatabase } from '../test/support/kernel.ts';
import { POSTGRES_URL, postgresReachable } from './postgres.ts';
import { log, median, ms, pairedMedian, quantile, rotated } from './stats.ts';

const CHARGES = Number(process.env.BENCH_LEDGER_CHARGES ?? 4000);
const CONCURRENCY = Number(process.env.BENCH_LEDGER_CONCURRENCY ?? 50);
const MANY_WALLETS = Number(process.env.BENCH_LEDGER_WALLETS ?? 200);
const AMOUNT = 1000n;
const RUNS = Number(process.env.BENCH_RUNS ?? 3);

interface Measurement {
  scenario: string;
  concurrency: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  serverCpuUsPerRequest: number;
  charges: number;
  succeeded: number;
  refused: number;
  wallets: number;
  /** The machine's 1-minute load average as the scenario ended (2 vCPUs here: above 2, it was shared). */
  loadAverage1m: number;
}

const wallet = () => getAddress(`0x${randomBytes(20).toString('hex')}`);

function postgresDatabase(): TestDatabase {
  const existing = TEST_DATABASES.find((database) => database.name === 'postgres');
  if (existing && POSTGRES_URL === process.env.TEST_DATABASE_URL) return existing;
  return {
    name: 'postgres',
    fresh() {
      const schema = `bench_${process.pid}_${randomBytes(4).toString('hex')}`;
      return {
        url: POSTGRES_URL,
        schema,
        cleanup: async () => {
          const admin = knex({ client: 'pg', connection: POSTGRES_URL, pool: { min: 0, max: 1 } });
          try {
            await admin.raw(`drop schema if exists "${schema}" cascade`);
          } finally {
            await admin.destroy();
          }
        },
      };
    },
  };
}

/**
 * How charges reach the ledger: `Ledger.charge` (group commit: the charges in flight decided and
 * written together, charge-batch.ts), or the baseline of one transaction a charge (`chargeOnce`, what
 * a batch falls back to).
 */
type Mode = 'group commit' | 'one transaction a charge' | typeof KNEX_OWN_CLIENT;
const KNEX_OWN_CLIENT = "one transaction a charge, knex's own SQLite client";

/**
 * Until the answer is called, the kernel's SQLite client runs every query as knex's own does (each
 * statement prepared and finalized). Changed on the class, not on one instance: knex makes each
 * transaction's client from the class's prototype.
 */
function withKnexOwnStatements(): () => void {
  const prototype = SqliteClientWithPreparedStatements.prototype;
  const kept = Object.getOwnPropertyDescriptor(prototype, '_query') as PropertyDescriptor;
  Object.defineProperty(prototype, '_query', {
    ...kept,
    value: (Object.getPrototypeOf(prototype) as typeof prototype)._query,
  });
  return () => Object.defineProperty(prototype, '_query', kept);
}

async function scenario(
  database: TestDatabase,
  name: 'hot wallet' | 'many wallets',
  mode: Mode,
): Promise<Measurement> {
  const restoreStatements = mode === KNEX_OWN_CLIENT ? withKnexOwnStatements() : () => undefined;
  const kernel = await openTestKernel({ database, clock: new ManualClock(Date.UTC(2026, 2, 18, 12)) });
  const service: LedgerService = await createLedgerService(kernel);
  const { ledger, agents } = service;
  try {
    const walletCount = name === 'hot wallet' ? 1 : MANY_WALLETS;
    const owners = Array.from({ length: walletCount }, wallet);
    const agentOf = new Map<string, string>();
    const big = AMOUNT * BigInt(CHARGES) * 10n;
    for (const owner of owners) {
      const agent = await agents.create(owner, { name: 'bench', model: 'bench' });
      agentOf.set(owner, agent.id);
      await ledger.setBudgets(owner, agent.id, { daily: big, weekly: big, monthly: big });
      // The hot wallet holds enough for 90 % of the charges; the many wallets for all of theirs.
      const funds = name === 'hot wallet' ? (AMOUNT * BigInt(CHARGES) * 9n) / 10n : big;
      await ledger.recordOnChainBalance(owner, funds, 1n);
    }
    const expected = name === 'hot wallet' ? Math.floor((CHARGES * 9) / 10) : CHARGES;
    const latencies: number[] = [];
    const succeededBy = new Map<string, number>();
    let next = 0;
    let refused = 0;
    const cpu = process.cpuUsage();
    const started = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        for (;;) {
          const i = next++;
          if (i >= CHARGES) return;
          const owner = owners[name === 'hot wallet' ? 0 : Math.floor(Math.random() * walletCount)] as string;
          const t0 = performance.now();
          try {
            const input = {
              wallet: owner,
              agentId: agentOf.get(owner) as string,
              amount: AMOUNT,
              idempotencyKey: `bench-${i}`,
            };
            await (mode === 'group commit' ? ledger.charge(input) : chargeOnce(ledger, chargeInput(input)));
            succeededBy.set(owner, (succeededBy.get(owner) ?? 0) + 1);
          } catch (err) {
            if (!(err instanceof SpendRefused)) throw err;
            refused += 1;
          }
          latencies.push(performance.now() - t0);
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    const used = process.cpuUsage(cpu);
    // The invariant, after the fact.
    const succeeded = [...succeededBy.values()].reduce((sum, n) => sum + n, 0);
    const problems: string[] = [];
    if (succeeded !== expected) problems.push(`${succeeded} charges succeeded, expected ${expected}`);
    for (const owner of owners) {
      const balance = await ledger.balance(owner);
      const rule = balance.onChainBalance - balance.unsettledSpend - balance.pendingWithdrawals;
      if (balance.available !== rule || balance.available < 0n) {
        problems.push(`${owner}: available ${balance.available}, rule ${rule}`);
      }
      const want = AMOUNT * BigInt(succeededBy.get(owner) ?? 0);
      if (balance.unsettledSpend !== want)
        problems.push(`${owner}: unsettled ${balance.unsettledSpend}, expected ${want}`);
      const budgets = await ledger.budgets(owner, agentOf.get(owner) as string);
      for (const window of ['daily', 'weekly', 'monthly'] as const) {
        const state = budgets[window];
        if (state.limit !== null && state.spent > state.limit)
          problems.push(`${owner}: ${window} over its limit`);
      }
    }
    const audit = await ledger.audit();
    if (!audit.ok)
      problems.push(
        `audit: ${JSON.stringify(audit.mismatches.slice(0, 3), (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}`,
      );
    if (problems.length > 0)
      throw new Error(`ledger bench ${database.name} ${name}: invariant broken:\n${problems.join('\n')}`);
    latencies.sort((a, b) => a - b);
    const measurement: Measurement = {
      scenario: `${database.name}: ${name} (${walletCount} wallet${walletCount === 1 ? '' : 's'}), charge with budgets, ${mode}; invariant held`,
      concurrency: CONCURRENCY,
      rps: Math.round(CHARGES / seconds),
      p50Ms: ms(quantile(latencies, 0.5)),
      p99Ms: ms(quantile(latencies, 0.99)),
      serverCpuUsPerRequest: Math.round((used.user + used.system) / CHARGES),
      charges: CHARGES,
      succeeded,
      refused,
      wallets: walletCount,
      loadAverage1m: Number(loadavg()[0]?.toFixed(2)),
    };
    log(measurement);
    return measurement;
  } finally {
    await service.close();
    await kernel.close();
    restoreStatements();
  }
}

/** A row of the table: the medians of a scenario's runs, the runs themselves kept in the JSON. */
interface Row extends Omit<Measurement, 'charges' | 'succeeded' | 'refused' | 'wallets' | 'loadAverage1m'> {
  runs: Measurement[];
}

/** A way's row: the medians of its runs, their range of charges/s named. */
function medianRow(measured: Measurement[]): Row {
  const rates = measured.map((run) => run.rps);
  const first = measured[0] as Measurement;
  return {
    scenario: `${first.scenario}; ${RUNS} runs: ${Math.min(...rates)}–${Math.max(...rates)} charges/s`,
    concurrency: CONCURRENCY,
    rps: Math.round(median(rates)),
    p50Ms: ms(median(measured.map((run) => run.p50Ms))),
    p99Ms: ms(median(measured.map((run) => run.p99Ms))),
    serverCpuUsPerRequest: Math.round(median(measured.map((run) => run.serverCpuUsPerRequest))),
    runs: measured,
  };
}

/** `measured` against `baseline`, paired by run: the ratio of charges/s, the differences of the rest. */
function ratioRow(name: string, measured: Measurement[], baseline: Measurement[]): Row {
  const ratios = measured.map((run, i) => run.rps / (baseline[i] as Measurement).rps);
  return {
    scenario: `${name}: ${median(ratios).toFixed(2)}× its charges/s (runs paired: ${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)}×)`,
    concurrency: CONCURRENCY,
    rps: 0,
    p50Ms: ms(pairedMedian(measured, baseline, (run) => run.p50Ms)),
    p99Ms: ms(pairedMedian(measured, baseline, (run) => run.p99Ms)),
    serverCpuUsPerRequest: Math.round(pairedMedian(measured, baseline, (run) => run.serverCpuUsPerRequest)),
    runs: [],
  };
}

export async function ledgerSuite(): Promise<Row[]> {
  const sqlite = TEST_DATABASES.find((database) => database.name === 'sqlite') as TestDatabase;
  const databases: TestDatabase[] = [sqlite];
  if (await postgresReachable()) databases.push(postgresDatabase());
  else process.stdout.write(`ledger bench: PostgreSQL not reachable at ${POSTGRES_URL}; SQLite only\n`);
  const rows: Row[] = [];
  for (const database of databases) {
    const modes: Mode[] = ['one transaction a charge', 'group commit'];
    if (database.name === 'sqlite') modes.push(KNEX_OWN_CLIENT);
    for (const name of ['hot wallet', 'many wallets'] as const) {
      const runs = new Map<Mode, Measurement[]>(modes.map((mode) => [mode, []]));
      // The modes take turns, each run in another order, so none always runs on a warmer machine.
      for (let run = 0; run < RUNS; run++) {
        for (const mode of rotated(modes, run)) runs.get(mode)?.push(await scenario(database, name, mode));
      }
      const measuredBy = (mode: Mode) => runs.get(mode) as Measurement[];
      for (const mode of modes) rows.push(medianRow(measuredBy(mode)));
      rows.push(
        ratioRow(
          `${database.name}: ${name}, group commit ÷ one transaction a charge`,
          measuredBy('group commit'),
          measuredBy('one transaction a charge'),
        ),
      );
      if (modes.includes(KNEX_OWN_CLIENT))
        rows.push(
          ratioRow(
            `${database.name}: ${name}, one transaction a charge, statements kept ÷ knex's own SQLite client`,
            measuredBy('one transaction a charge'),
            measuredBy(KNEX_OWN_CLIENT),
          ),
        );
    }
  }
  return rows;
}
