import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { redactSecrets, type CheckResult, type Status } from '@sigil/plugin-api/kit';
import { toJunitXml } from './junit.ts';
import { toMarkdownSummary } from './markdown.ts';
import type { Exclusion } from './selection.ts';

export interface Summary {
  total: number;
  pass: number;
  fail: number;
  notApplicable: number;
  mustFailed: number;
  shouldFailed: number;
  /** Left out on the tester's request (`--skip`), not run: not counted in `total`. */
  excluded: number;
}

/** What one run found: the shape of `report.json`, and the input of the other two files. */
export interface Report {
  /** `deployment`, or `plugin` for a contract kit run. */
  suite: 'deployment' | 'plugin';
  /** What was tested: the two base URLs, or the plugin's name and where it was loaded from. */
  target: Record<string, string>;
  startedAt: string;
  durationMs: number;
  summary: Summary;
  results: readonly CheckResult[];
  /** What the tester's `--skip` left out of the run, so no reader takes the run for a whole one. */
  excluded: readonly Exclusion[];
}

export const REPORT_FILES = { json: 'report.json', junit: 'junit.xml', markdown: 'summary.md' } as const;

export function summarize(results: readonly CheckResult[], excluded: readonly Exclusion[] = []): Summary {
  const count = (status: Status) => results.filter((result) => result.status === status).length;
  const failed = results.filter((result) => result.status === 'fail');
  return {
    total: results.length,
    pass: count('pass'),
    fail: count('fail'),
    notApplicable: count('not-applicable'),
    mustFailed: failed.filter((result) => result.level === 'MUST').length,
    shouldFailed: failed.filter((result) => result.level === 'SHOULD').length,
    excluded: excluded.length,
  };
}

export function buildReport(
  suite: Report['suite'],
  target: Record<string, string>,
  started: Date,
  results: readonly CheckResult[],
  excluded: readonly Exclusion[] = [],
): Report {
  return {
    suite,
    target,
    startedAt: started.toISOString(),
    durationMs: Date.now() - started.getTime(),
    summary: summarize(results, excluded),
    results,
    excluded,
  };
}

/** 1 when any MUST failed; SHOULD failures and not-applicable results keep a run green. */
export const exitCodeFor = (report: Report): 0 | 1 => (report.summary.mustFailed > 0 ? 1 : 0);

/**
 * Writes report.json, junit.xml and summary.md into `dir`. Results were redacted as they were
 * recorded; each file gets one more pass by shape, in case a title or target carried a credential.
 */
export async function writeReports(report: Report, dir: string): Promise<string[]> {
  await mkdir(dir, { recursive: true });
  const files: [string, string][] = [
    [REPORT_FILES.json, `${JSON.stringify(report, null, 2)}\n`],
    [REPORT_FILES.junit, toJunitXml(report)],
    [REPORT_FILES.markdown, toMarkdownSummary(report)],
  ];
  const written: string[] = [];
  for (const [name, content] of files) {
    const path = join(dir, name);
    await writeFile(path, redactSecrets(content));
    written.push(path);
  }
  return written;
}

const STATUS_LABEL: Record<Status, string> = { pass: 'PASS', fail: 'FAIL', 'not-applicable': 'N/A' };

export const statusLabel = (status: Status): string => STATUS_LABEL[status];

/**
 * A result as one terminal line, with its reason indented below when it did not pass and, below a
 * failure, the text of the spec it checks (a plugin kit's: the contract's words), so that a failure
 * explains itself without the sources at hand.
 */
export function formatResultLine(result: CheckResult): string {
  const line = `${statusLabel(result.status).padEnd(5)} ${result.level.padEnd(7)} ${result.id.padEnd(34)} ${result.title}`;
  if (result.reason === undefined) return line;
  const because = `${line}\n      -> ${result.reason}`;
  return result.status === 'fail' ? `${because}\n      checks: ${result.spec}` : because;
}

/** A requirement left out by `--skip`, as one terminal line in the shape of a result's. */
export function formatExclusionLine(exclusion: Exclusion): string {
  return `${'SKIP'.padEnd(5)} ${exclusion.level.padEnd(7)} ${exclusion.id.padEnd(34)} ${exclusion.title}\n      -> ${excludedOnRequest(exclusion)}`;
}

export const excludedOnRequest = (exclusion: Exclusion): string =>
  `excluded on request (--skip ${exclusion.excludedBy})`;

/** The closing line on the terminal; deliberately not "N passed, N failed", which CI reads as test totals. */
export function formatSummaryLine(report: Report): string {
  const { summary } = report;
  const verdict = summary.mustFailed > 0 ? 'FAIL' : 'OK';
  return (
    `${report.suite} conformance: ${verdict} (MUST failed ${summary.mustFailed}, SHOULD failed ${summary.shouldFailed}; ` +
    `pass ${summary.pass}, fail ${summary.fail}, not applicable ${summary.notApplicable}; ` +
    `${summary.excluded > 0 ? `excluded on request ${summary.excluded}; ` : ''}${(report.durationMs / 1000).toFixed(1)} s)`
  );
}
