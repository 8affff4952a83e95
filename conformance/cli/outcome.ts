import type { CheckResult } from '@sigil/plugin-api/kit';
import { EXIT_USAGE } from '../cli.ts';
import {
  exitCodeFor,
  formatExclusionLine,
  formatResultLine,
  formatSummaryLine,
  writeReports,
  type Report,
} from '../report.ts';

/** What the `sigil conformance …` commands share: usage errors, results as they come, the summary. */

/** A mistake in the invocation, reported in one line and with exit code 2. */
export class UsageError extends Error {}

/** Wraps an action that returns an exit code, turning usage errors into exit 2. */
export function exiting<Args extends unknown[]>(run: (...args: Args) => Promise<number>) {
  return async (...args: Args): Promise<void> => {
    let code: number;
    try {
      code = await run(...args);
    } catch (err) {
      if (!(err instanceof UsageError)) throw err;
      process.stderr.write(`sigil conformance: ${err.message}\n`);
      code = EXIT_USAGE;
    }
    process.exit(code);
  };
}

export const printResult = (result: CheckResult): void => {
  process.stdout.write(`${formatResultLine(result)}\n`);
};

export async function finish(report: Report, out: string | undefined): Promise<number> {
  for (const exclusion of report.excluded) process.stdout.write(`${formatExclusionLine(exclusion)}\n`);
  process.stdout.write(`\n${formatSummaryLine(report)}\n`);
  if (out !== undefined) process.stdout.write(`reports: ${(await writeReports(report, out)).join(', ')}\n`);
  return exitCodeFor(report);
}
