import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { BUILD_MANIFEST, type BuildManifest } from '../../core/layout.ts';
import { SIGIL_BIN } from './cli.ts';
import { repoPath } from './paths.ts';

export interface Build {
  /** The folder holding bin/sigil.js and dist/, as a checkout does. */
  dir: string;
  /** Its bin/sigil.js: with NODE_ENV=production it runs `dist`. */
  sigil: string;
  dist: string;
  manifest: BuildManifest;
}

/**
 * `npm run build` into a fresh folder inside the repository (the compiled code finds node_modules by
 * walking up), with a copy of bin/sigil.js beside its dist/: a checkout's layout that leaves the
 * repository's own dist/ alone.
 */
export async function buildInto(prefix: string): Promise<Build> {
  const dir = mkdtempSync(repoPath('test', `.tmp-${prefix}-`));
  const dist = join(dir, 'dist');
  const built = await runBuild(['--out', dist]);
  if (built.code !== 0) throw new Error(`npm run build failed:\n${built.stderr}`);
  const sigil = join(dir, 'bin', 'sigil.js');
  mkdirSync(join(dir, 'bin'));
  copyFileSync(SIGIL_BIN, sigil);
  const manifest = JSON.parse(readFileSync(join(dist, BUILD_MANIFEST), 'utf8')) as BuildManifest;
  return { dir, sigil, dist, manifest };
}

/** `npm run build -- <args>` from the repository, to completion. */
export async function runBuild(args: readonly string[]): Promise<{ code: number; stderr: string }> {
  try {
    await promisify(execFile)('npm', ['run', '--silent', 'build', '--', ...args], { cwd: repoPath() });
    return { code: 0, stderr: '' };
  } catch (err) {
    const { code, stderr } = err as { code: number; stderr: string };
    return { code, stderr };
  }
}

/** The preload that records every module URL the process resolves into the file SIGIL_LOADED_FILE names. */
export const RECORD_LOADS = repoPath('test', 'fixtures', 'build', 'record-loads.mjs');
