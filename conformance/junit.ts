import { describeEvidence, type CheckResult } from '@sigil/plugin-api/kit';
import { excludedOnRequest, type Report } from './report.ts';
import type { Exclusion } from './selection.ts';

/**
 * JUnit XML as CI systems read it: one <testcase> per check, a failed check as <failure>, a check that
 * does not apply, or that the tester excluded, as <skipped message="…">. Reasons and evidence come from servers and plugins, so every
 * value is escaped and characters XML 1.0 forbids are replaced.
 */

/** Characters outside XML 1.0's `Char` production (most control characters, lone surrogates). */
const NOT_XML_CHAR = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/gu;

const ENTITIES: Record<string, string> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&apos;',
};

export function escapeXmlText(value: string): string {
  return value.replace(NOT_XML_CHAR, '\uFFFD').replace(/[&<>"']/g, (char) => ENTITIES[char] ?? char);
}

/** Attribute values also keep their line breaks and tabs, which XML would otherwise fold to spaces. */
export function escapeXmlAttribute(value: string): string {
  return escapeXmlText(value).replace(/\n/g, '&#10;').replace(/\r/g, '&#13;').replace(/\t/g, '&#9;');
}

const seconds = (ms: number): string => (ms / 1000).toFixed(3);

function attributes(values: Record<string, string | number>): string {
  return Object.entries(values)
    .map(([name, value]) => ` ${name}="${escapeXmlAttribute(String(value))}"`)
    .join('');
}

function details(result: CheckResult): string {
  const lines = [`${result.level}: ${result.reason ?? ''}`, `spec: ${result.spec}`];
  const evidence = describeEvidence(result.evidence);
  if (evidence.length > 0) lines.push('evidence:', ...evidence.map((line) => `  ${line}`));
  return escapeXmlText(lines.join('\n'));
}

function testcase(result: CheckResult, classname: string): string {
  const open = `    <testcase${attributes({ classname, name: `${result.id} ${result.title}`, time: seconds(result.durationMs) })}`;
  switch (result.status) {
    case 'pass':
      return `${open}/>`;
    case 'fail':
      return `${open}>\n      <failure${attributes({ message: result.reason ?? '', type: result.level })}>${details(result)}</failure>\n    </testcase>`;
    case 'not-applicable':
      return `${open}>\n      <skipped${attributes({ message: result.reason ?? '' })}/>\n    </testcase>`;
  }
}

function excludedTestcase(exclusion: Exclusion, classname: string): string {
  const name = `${exclusion.id} ${exclusion.title}`;
  return `    <testcase${attributes({ classname, name, time: seconds(0) })}>\n      <skipped${attributes({ message: excludedOnRequest(exclusion) })}/>\n    </testcase>`;
}

export function toJunitXml(report: Report): string {
  const { summary } = report;
  const suiteName = `sigil conformance ${report.suite}`;
  const counts = {
    tests: summary.total + summary.excluded,
    failures: summary.fail,
    errors: 0,
    skipped: summary.notApplicable + summary.excluded,
    time: seconds(report.durationMs),
  };
  const properties = Object.entries(report.target).map(
    ([name, value]) => `      <property${attributes({ name, value })}/>`,
  );
  return [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuites${attributes({ name: suiteName, ...counts })}>`,
    `  <testsuite${attributes({ name: suiteName, ...counts, timestamp: report.startedAt })}>`,
    '    <properties>',
    ...properties,
    '    </properties>',
    ...report.results.map((result) => testcase(result, `conformance.${report.suite}`)),
    ...report.excluded.map((exclusion) => excludedTestcase(exclusion, `conformance.${report.suite}`)),
    '  </testsuite>',
    '</testsuites>',
    '',
  ].join('\n');
}
