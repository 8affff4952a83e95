import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { repoPath } from '../../support/paths.ts';
import {
  CONFORMANCE_VERSION,
  failing,
  LEGS,
  REVISIONS,
  scoredScenarios,
  type CheckStatus,
  type Leg,
  type Revision,
  type SuiteRun,
} from './suite.ts';

/** One leg's run of one revision, as recorded: every scored scenario's checks, and the listed gaps. */
export interface LegRun {
  date: string;
  exitCode: number | null;
  /** Check id → status (the most severe of its occurrences), by scored scenario. */
  scenarios: Record<string, Record<string, CheckStatus>>;
  /** The expected failures the run was given: `scenario` or `scenario:check-id`, with the reason. */
  expectedFailures: { item: string; reason: string }[];
}

export interface ConformanceResults {
  suite: 'mcp-conformance';
  conformance: string;
  legs: Record<Leg, string>;
  runs: Partial<Record<Revision, Partial<Record<Leg, LegRun>>>>;
}

const RESULTS_FILE = repoPath('bench', 'results', 'mcp-conformance.json');
const PAGE = repoPath('docs', 'mcp-conformance.md');
// The README shows the same table, folded under its one-line summary (docs/mcp-conformance.md says
// what each leg is and why each gap cannot apply).
const README = repoPath('README.md');
const TABLE_START = '<!-- table: written by test/conformance/mcp-official.test.ts -->';
const TABLE_END = '<!-- end of table -->';

const LEG_NAMES: Record<Leg, string> = {
  B: 'the fixture server directly, Streamable HTTP (baseline)',
  S: 'the gateway, POST /mcp/server/cf',
  M: 'the gateway, POST /mcp with a wallet token and X-MCP-Session, cf enabled',
};

const SEVERITY: Record<CheckStatus, number> = { FAILURE: 4, WARNING: 3, SUCCESS: 2, INFO: 1, SKIPPED: 0 };

/** A run's scored scenarios, each check id with its most severe status (as the suite judges ids). */
export function legRun(
  run: SuiteRun,
  revision: Revision,
  expectedFailures: { item: string; reason: string }[],
): LegRun {
  const scenarios: LegRun['scenarios'] = {};
  for (const scenario of scoredScenarios(revision)) {
    const checks: Record<string, CheckStatus> = {};
    for (const check of run.scenarios.get(scenario) ?? []) {
      const seen = checks[check.id];
      if (seen === undefined || SEVERITY[check.status] > SEVERITY[seen]) checks[check.id] = check.status;
    }
    scenarios[scenario] = checks;
  }
  return { date: new Date().toISOString(), exitCode: run.exitCode, scenarios, expectedFailures };
}

/** The entry that excuses a failing check of a scenario, if any. */
const excuse = (run: LegRun, scenario: string, checkId: string) =>
  run.expectedFailures.find(({ item }) => item === scenario || item === `${scenario}:${checkId}`);

/**
 * What passes on the baseline but not on `leg`, unlisted: each `scenario:check-id`. A check the leg
 * did not reach counts as failing, unless a listed check of its scenario failed before it (a scenario
 * stops at a failed prerequisite, as the suite's own rules allow). The gateway adds nothing the
 * fixture lacks, so every difference must be a listed, reasoned gap.
 */
export function unlistedRegressions(baseline: LegRun, leg: LegRun): string[] {
  const regressions: string[] = [];
  for (const [scenario, checks] of Object.entries(baseline.scenarios)) {
    const there = leg.scenarios[scenario] ?? {};
    const stoppedAtAGap = Object.entries(there).some(
      ([checkId, status]) => failing(status) && excuse(leg, scenario, checkId),
    );
    for (const [checkId, status] of Object.entries(checks)) {
      if (failing(status)) continue;
      const result = there[checkId];
      if (result === undefined ? stoppedAtAGap : !failing(result)) continue;
      if (!excuse(leg, scenario, checkId)) regressions.push(`${scenario}:${checkId}`);
    }
  }
  return regressions;
}

/** Entries without a reason: every gap is listed with why. */
export const unexplained = (entries: { item: string; reason: string }[]): string[] =>
  entries.filter(({ reason }) => reason.trim() === '').map(({ item }) => item);

/**
 * Prints the table of these runs (what CI's output shows) and, under `npm run conformance:mcp`
 * (MCP_CONFORMANCE_RECORD=1), records them (keeping the other legs' last ones) in bench/results and
 * the table of docs/mcp-conformance.md: a plain test run leaves the checkout as it was.
 */
export function recordRuns(runs: { leg: Leg; revision: Revision; run: LegRun }[]): ConformanceResults {
  const results: ConformanceResults = existsSync(RESULTS_FILE)
    ? (JSON.parse(readFileSync(RESULTS_FILE, 'utf8')) as ConformanceResults)
    : { suite: 'mcp-conformance', conformance: CONFORMANCE_VERSION, legs: LEG_NAMES, runs: {} };
  results.conformance = CONFORMANCE_VERSION;
  results.legs = LEG_NAMES;
  for (const { leg, revision, run } of runs) (results.runs[revision] ??= {})[leg] = run;
  console.log(`\nMCP conformance (${CONFORMANCE_VERSION}):\n${markdown(results)}`);
  if (process.env.MCP_CONFORMANCE_RECORD !== '1') return results;
  writeFileSync(RESULTS_FILE, `${JSON.stringify(results, null, 2)}\n`);
  replaceTable(PAGE, markdown(results));
  replaceTable(
    README,
    `<details><summary>Scenarios passing every check: ${summary(results).join('; ')}</summary>\n\n${markdown(results)}\n</details>\n`,
  );
  return results;
}

function replaceTable(file: string, table: string): void {
  const page = readFileSync(file, 'utf8');
  const start = page.indexOf(TABLE_START);
  const end = page.indexOf(TABLE_END);
  if (start === -1 || end === -1) throw new Error(`${file} lost its table markers`);
  writeFileSync(file, `${page.slice(0, start + TABLE_START.length)}\n\n${table}\n${page.slice(end)}`);
}

const passingScenarios = (run: LegRun): number =>
  Object.values(run.scenarios).filter((checks) => !Object.values(checks).some(failing)).length;

/** Per revision and leg: how many scored scenarios pass every check. */
function summary(results: ConformanceResults): string[] {
  return REVISIONS.map((revision) => {
    const legs = LEGS.map((leg) => {
      const run = results.runs[revision]?.[leg];
      if (!run) return `${leg} not run`;
      return `${leg} ${passingScenarios(run)}/${Object.keys(run.scenarios).length}`;
    });
    return `${revision}: ${legs.join(', ')}`;
  });
}

/** The table: a row per scored scenario, a column per revision and leg; gaps numbered with their reasons. */
export function markdown(results: ConformanceResults): string {
  const reasons: string[] = [];
  const note = (reason: string) => {
    const index = reasons.indexOf(reason);
    return index === -1 ? reasons.push(reason) : index + 1;
  };
  const cell = (revision: Revision, leg: Leg, scenario: string): string => {
    const run = results.runs[revision]?.[leg];
    if (!scoredScenarios(revision).includes(scenario)) return '–';
    if (!run) return 'not run';
    const checks = Object.entries(run.scenarios[scenario] ?? {});
    if (checks.length === 0) return 'no checks';
    const failed = checks.filter(([, status]) => failing(status));
    if (failed.length === 0) return '✓';
    const notes = new Set<number>();
    for (const [checkId] of failed) {
      const entry = excuse(run, scenario, checkId);
      if (!entry) return `**✗ unlisted: ${checkId}**`;
      notes.add(note(entry.reason));
    }
    const refs = [...notes].map((n) => `[${n}]`).join('');
    return failed.length === checks.length
      ? `✗ ${refs}`
      : `✗ ${failed.length}/${checks.length} checks ${refs}`;
  };
  const scenarios = [...new Set(REVISIONS.flatMap((revision) => scoredScenarios(revision)))];
  const header = `| scenario | ${REVISIONS.flatMap((r) => LEGS.map((leg) => `${r} ${leg}`)).join(' | ')} |`;
  const rows = scenarios.map(
    (scenario) =>
      `| ${scenario} | ${REVISIONS.flatMap((r) => LEGS.map((leg) => cell(r, leg, scenario))).join(' | ')} |`,
  );
  const passed = REVISIONS.flatMap((revision) =>
    LEGS.map((leg) => {
      const run = results.runs[revision]?.[leg];
      if (!run) return `${revision} ${leg}: not run`;
      return `${revision} ${leg}: ${passingScenarios(run)}/${Object.keys(run.scenarios).length} scenarios pass, exit ${run.exitCode} (${run.date.slice(0, 10)})`;
    }),
  );
  return [
    `@modelcontextprotocol/conformance ${results.conformance}, the required server scenarios of each revision: ` +
      '✓ every check passes, ✗ a listed gap (its numbered reason below), – not part of that revision.',
    '',
    header,
    `|---|${REVISIONS.flatMap(() => LEGS.map(() => ':-:')).join('|')}|`,
    ...rows,
    '',
    ...reasons.map((reason, index) => `${index + 1}. ${reason}`),
    '',
    ...passed.map((line) => `- ${line}`),
    '',
  ].join('\n');
}
