import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { repoPath } from '../support/paths.ts';

const execFileAsync = promisify(execFile);

/**
 * Runs `node <args>` from the repository's root, as the README and the banner print the examples,
 * with the SIGIL_* overrides in `env`; resolves to its stdout, rejects with its output on a failure.
 */
export async function runExample(args: readonly string[], env: NodeJS.ProcessEnv): Promise<string> {
  const { stdout } = await execFileAsync(process.execPath, args, {
    cwd: repoPath(),
    env: { ...process.env, ...env },
    timeout: 90_000,
  });
  return stdout;
}
