import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

/**
 * The bundle's script run as a relying party runs it: in a fresh folder holding nothing but the
 * bundle, written out by the command its `usage` gives, by plain `node` with no NODE_PATH or
 * NODE_OPTIONS (so nothing of this repository can be found).
 *
 *     const folder = new BundleFolder(await res.text());
 *     const run = folder.run();            // node verify-bundle.cjs bundle.json
 *     folder.remove();
 */

/** What the script printed and how it exited. */
export interface ScriptRun {
  status: number | null;
  output: string;
  /** The id of each check printed PASS, in order. */
  passed: string[];
  /** The id of each check printed FAIL, in order. */
  failed: string[];
  /** The detail printed for a check. */
  detail(id: string): string | undefined;
}

export const BUNDLE_FILE = 'bundle.json';
const SCRIPT_FILE = 'verify-bundle.cjs';
/** `node` on the PATH, and the system's tools: nothing else of this process's environment. */
const CLEAN_ENV = { PATH: `${dirname(process.execPath)}:/usr/bin:/bin` };

function runScript(cwd: string, args: readonly string[]): ScriptRun {
  const result = spawnSync(process.execPath, [SCRIPT_FILE, ...args], {
    cwd,
    env: CLEAN_ENV,
    encoding: 'utf8',
  });
  const output = `${result.stdout}${result.stderr}`;
  const lines = output.split('\n').map((line) => /^(PASS|FAIL) (\S+) (.*)$/.exec(line));
  const checks = lines.filter((match) => match !== null);
  return {
    status: result.status,
    output,
    passed: checks.filter((match) => match[1] === 'PASS').map((match) => match[2] as string),
    failed: checks.filter((match) => match[1] === 'FAIL').map((match) => match[2] as string),
    detail: (id) => checks.find((match) => match[2] === id)?.[3],
  };
}

export class BundleFolder {
  readonly dir = mkdtempSync(join(tmpdir(), 'sigil-bundle-'));

  /** Writes only `bundleText` as bundle.json, then the script out of it as the bundle's usage says. */
  constructor(bundleText: string) {
    writeFileSync(join(this.dir, BUNDLE_FILE), bundleText);
    const { offlineVerification } = JSON.parse(bundleText) as { offlineVerification: { usage: string } };
    const extract = offlineVerification.usage
      .split('\n')
      .map((line) => line.trim())
      .find((line) => line.startsWith('node -e '));
    if (extract === undefined)
      throw new Error(`the usage gives no command writing the script:\n${offlineVerification.usage}`);
    execFileSync('/bin/sh', ['-c', extract], { cwd: this.dir, env: CLEAN_ENV });
  }

  /** `node verify-bundle.cjs bundle.json`, or the arguments given. */
  run(args: readonly string[] = [BUNDLE_FILE]): ScriptRun {
    return runScript(this.dir, args);
  }

  /** Writes `bundle` (changed) beside the original and runs the script on it. */
  runOn(bundle: unknown, args: readonly string[] = []): ScriptRun {
    writeFileSync(join(this.dir, 'changed.json'), JSON.stringify(bundle));
    return runScript(this.dir, ['changed.json', ...args]);
  }

  remove(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
