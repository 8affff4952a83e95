import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository's root, for tests that read or run its files by path wherever the test file sits. */
export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** A path under the repository's root. */
export const repoPath = (...parts: string[]): string => join(REPO_ROOT, ...parts);

/** A path under `test/fixtures`. */
export const fixturePath = (...parts: string[]): string => repoPath('test', 'fixtures', ...parts);

const processDirs = new Map<string, string>();

/** A temp directory `sigil-<name>-…` of this test process, made at first use and removed at its exit. */
export function processTempDir(name: string): string {
  let dir = processDirs.get(name);
  if (!dir) {
    const made = mkdtempSync(join(tmpdir(), `sigil-${name}-`));
    process.once('exit', () => rmSync(made, { recursive: true, force: true }));
    processDirs.set(name, made);
    dir = made;
  }
  return dir;
}
