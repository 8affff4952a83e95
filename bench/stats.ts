/** Summaries the benchmark suites share. */

/** The median; of an even count, the mean of the two middle values. */
export const median = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? (sorted[mid] ?? 0) : ((sorted[mid - 1] ?? 0) + (sorted[mid] ?? 0)) / 2;
};

/** Milliseconds as reported: three decimals. */
export const ms = (value: number) => Number(value.toFixed(3));

/** One result row on stdout as it is measured (its runs stay in the JSON file). */
export const log = (row: object) => process.stdout.write(`${JSON.stringify({ ...row, runs: undefined })}\n`);
