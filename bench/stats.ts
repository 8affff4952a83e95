/** Summaries the benchmark suites share. */
import type { Knex } from 'knex';

/** The columns of bench/README.md's table a suite's row fills. */
export interface BenchRow {
  scenario: string;
  concurrency: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  serverCpuUsPerRequest?: number;
}

/** The median; of an even count, the mean of the two middle values. */
export const median = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[mid] ?? 0) : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
};

/** The median of the paired differences `pick(a[i]) − pick(b[i])` (rounds of a scenario less its floor's). */
export const pairedMedian = <T>(a: readonly T[], b: readonly T[], pick: (sample: T) => number): number =>
  median(a.map((sample, i) => pick(sample) - pick(b[i] as T)));

/** The value at quantile `q` (0.1, 0.99, …) of an ascending list: the sample below which `q` of them lie. */
export const quantile = (sorted: readonly number[], q: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;

/** `items` rotated left by `by` places: each run in another order, so no scenario always follows the same one. */
export const rotated = <T>(items: readonly T[], by: number): T[] => {
  const start = by % items.length;
  return [...items.slice(start), ...items.slice(0, start)];
};

/** Milliseconds as reported: three decimals. */
export const ms = (value: number) => Number(value.toFixed(3));

/** One result row on stdout as it is measured (its runs stay in the JSON file). */
export const log = (row: object) => process.stdout.write(`${JSON.stringify({ ...row, runs: undefined })}\n`);

/** Statements (each BEGIN and COMMIT included) and commits on `db` while `work` runs. */
export async function counted<T>(db: Knex, work: () => Promise<T>) {
  const counts = { statements: 0, commits: 0 };
  const onQuery = (query: { sql: string }) => {
    counts.statements++;
    if (query.sql === 'COMMIT;' || query.sql === 'COMMIT') counts.commits++;
  };
  db.on('query', onQuery);
  try {
    return { result: await work(), ...counts };
  } finally {
    db.off('query', onQuery);
  }
}
