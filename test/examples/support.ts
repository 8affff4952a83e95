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

/**
 * The arguments of `node` in the command the `sigil up` banner prints on its `label` line (`chat`,
 * `canvas`) for `example`; throws when the banner has no such line.
 */
export function printedExample(output: string, label: string, example: string): string[] {
  const line = new RegExp(`^${label} +(node examples/${example}(?: \\S+)?) {3}\\(`, 'm').exec(output);
  if (!line?.[1]) throw new Error(`the banner prints no ${label} line for ${example}:\n${output}`);
  return line[1].split(' ').slice(1);
}
