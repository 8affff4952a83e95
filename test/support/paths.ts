import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository's root, for tests that read or run its files by path wherever the test file sits. */
export const REPO_ROOT = fileURLToPath(new URL('../..', import.meta.url));

/** A path under the repository's root. */
export const repoPath = (...parts: string[]): string => join(REPO_ROOT, ...parts);

/** A path under `test/fixtures`. */
export const fixturePath = (...parts: string[]): string => repoPath('test', 'fixtures', ...parts);
