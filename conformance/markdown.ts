import { describeEvidence, type CheckResult, type Status } from '@sigil/plugin-api/kit';
import { excludedOnRequest, type Report } from './report.ts';

/** summary.md: the verdict, one table row per check, then the details a reader needs to act on a failure. */

const STATUS_CELL: Record<Status, string> = { pass: 'pass', fail: '**FAIL**', 'not-applicable': 'n/a' };

/** Table cells hold one line, and a `|` from a server's message must not open a new column. */
const cell = (text: string): string => text.replace(/\r?\n/g, ' ').replace(/\|/g, '\\|');

/** Inline code that survives backticks in the text itself. */
const code = (text: string): string => {
  const fence = text.includes('`') ? '``' : '`';
  return `${fence}${text}${fence}`;
};

function section(title: string, results: readonly CheckResult[], withEvidence: boolean): string[] {
  if (results.length === 0) return [];
  const lines = ['', `## ${title}`];
  for (const result of results) {
    lines.push('', `### ${code(result.id)} ${result.title} (${result.level})`, '');
    lines.push(`- Spec: ${result.spec}`, `- Reason: ${result.reason ?? ''}`);
    if (withEvidence && result.evidence.length > 0) {
      lines.push('- Evidence:', ...describeEvidence(result.evidence).map((line) => `  - ${code(line)}`));
    }
  }
  return lines;
}

export function toMarkdownSummary(report: Report): string {
  const { summary } = report;
  const verdict = summary.mustFailed > 0 ? `FAIL: ${summary.mustFailed} MUST requirement(s) failed` : 'PASS';
  const lines = [
    `# Sigil conformance: ${report.suite}`,
    '',
    ...Object.entries(report.target).map(([name, value]) => `- ${name}: ${code(value)}`),
    `- Started: ${report.startedAt} (${(report.durationMs / 1000).toFixed(1)} s)`,
    '',
    `**${verdict}**. ${summary.pass} passed, ${summary.fail} failed (${summary.shouldFailed} of them SHOULD), ` +
      `${summary.notApplicable} not applicable, of ${summary.total}` +
      (summary.excluded > 0 ? `; ${summary.excluded} excluded on request, not run.` : '.'),
    '',
    '| Status | Level | Id | Title |',
    '|---|---|---|---|',
    ...report.results.map(
      (result) =>
        `| ${STATUS_CELL[result.status]} | ${result.level} | ${code(result.id)} | ${cell(result.title)} |`,
    ),
    ...report.excluded.map(
      (exclusion) =>
        `| ${cell(excludedOnRequest(exclusion))} | ${exclusion.level} | ${code(exclusion.id)} | ${cell(exclusion.title)} |`,
    ),
    ...section(
      'Failures',
      report.results.filter((result) => result.status === 'fail'),
      true,
    ),
    ...section(
      'Not applicable',
      report.results.filter((result) => result.status === 'not-applicable'),
      false,
    ),
    '',
  ];
  return lines.join('\n');
}
