import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { node22 } from '../../support/node22.ts';
import { processTempDir } from '../../support/paths.ts';

/**
 * The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in devDependencies)
 * run as its CLI: `conformance server --url … --requirements <revision> --expected-failures <yaml>`.
 * It needs Node 22 (test/support/node22.ts).
 */

const require = createRequire(import.meta.url);
const packageDir = dirname(require.resolve('@modelcontextprotocol/conformance/package.json'));
const CLI = join(packageDir, 'dist', 'index.js');

export const CONFORMANCE_VERSION = (
  JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8')) as { version: string }
).version;

/** The protocol revisions the gateway serves, each a frozen requirement set of the suite. */
export const REVISIONS = ['2025-11-25', '2026-07-28'] as const;
export type Revision = (typeof REVISIONS)[number];

/** B: the fixture server directly; S: the gateway's POST /mcp/server/cf; M: the gateway's POST /mcp. */
export const LEGS = ['B', 'S', 'M'] as const;
export type Leg = (typeof LEGS)[number];

/** Where a leg's expected failures are, one file per leg and revision. */
export const expectedFailuresFile = (leg: Leg, revision: Revision): string =>
  join(import.meta.dirname, `${leg}-${revision}.yaml`);

export type CheckStatus = 'SUCCESS' | 'FAILURE' | 'WARNING' | 'SKIPPED' | 'INFO';

/** One entry of a scenario's checks.json. */
export interface Check {
  id: string;
  status: CheckStatus;
  errorMessage?: string;
}

/** The suite counts a WARNING as a failure (its expected-failures rules do). */
export const failing = (status: CheckStatus): boolean => status === 'FAILURE' || status === 'WARNING';

export interface SuiteRun {
  /** 0: every failure was listed and no listed entry passed; 1 otherwise. */
  exitCode: number | null;
  output: string;
  /** The checks of each scenario run (not-scored ones included), by scenario name. */
  scenarios: Map<string, Check[]>;
}

/** A list of a small YAML document (`key:` then `  - item`), with each item's reason: its own comment or the comment lines above its group. */
export function yamlList(text: string, key: string): { item: string; reason: string }[] {
  const items: { item: string; reason: string }[] = [];
  let inside = false;
  let reason = '';
  for (const line of text.split('\n')) {
    if (/^\S/.test(line) && !line.startsWith('#')) {
      inside = line.trim() === `${key}:`;
      reason = '';
      continue;
    }
    if (!inside) continue;
    const comment = /^\s*#\s?(.*)$/.exec(line);
    if (comment) {
      reason = reason === '' ? (comment[1] ?? '') : `${reason} ${comment[1] ?? ''}`;
      continue;
    }
    const entry = /^\s+-\s+([^\s#]+)\s*(?:#\s*(.*))?$/.exec(line);
    if (entry) {
      items.push({ item: entry[1] ?? '', reason: entry[2] ?? reason });
      continue;
    }
    if (line.trim() === '') reason = '';
  }
  return items;
}

/** The server scenarios a revision's frozen requirement set scores (not the ones it only runs). */
export function scoredScenarios(revision: Revision): string[] {
  const text = readFileSync(join(packageDir, 'requirements', `${revision}.yaml`), 'utf8');
  return yamlList(text, 'server').map(({ item }) => item);
}

/** A leg's expected failures: `scenario` or `scenario:check-id`, each with its reason. */
export function expectedFailures(leg: Leg, revision: Revision): { item: string; reason: string }[] {
  const file = expectedFailuresFile(leg, revision);
  return existsSync(file) ? yamlList(readFileSync(file, 'utf8'), 'server') : [];
}

/** Runs the suite's required server scenarios of `revision` against `url`, with the leg's expected failures. */
export async function runSuite(url: string, leg: Leg, revision: Revision): Promise<SuiteRun> {
  const out = mkdtempSync(join(processTempDir('mcp-conformance'), `${leg}-${revision}-`));
  const args = [CLI, 'server', '--url', url, '--requirements', revision, '-o', out];
  if (existsSync(expectedFailuresFile(leg, revision)))
    args.push('--expected-failures', expectedFailuresFile(leg, revision));
  const child = spawn(await node22(), args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
  const exitCode = await new Promise<number | null>((resolve) =>
    child.once('close', (code) => resolve(code)),
  );
  clearTimeout(timer);
  return { exitCode, output, scenarios: readChecks(out) };
}

/** `<out>/server-<scenario>-<timestamp>/checks.json`, by scenario. */
function readChecks(out: string): Map<string, Check[]> {
  const scenarios = new Map<string, Check[]>();
  for (const dir of readdirSync(out)) {
    const name = /^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$/.exec(dir)?.[1];
    const file = join(out, dir, 'checks.json');
    if (name === undefined || !existsSync(file)) continue;
    scenarios.set(name, JSON.parse(readFileSync(file, 'utf8')) as Check[]);
  }
  return scenarios;
}
