import { execFile } from 'node:child_process';
import { mkdir } from 'node:fs/promises';
import { promisify } from 'node:util';
import { isSigilError, SigilError } from '../errors.ts';

const execFileAsync = promisify(execFile);

/**
 * git as canvas nodes and their host run it: no configuration of this machine's or its user's, never a
 * prompt for credentials (a push that needs them fails at once), and a fixed identity for commits.
 */
export const CANVAS_GIT_ENV: Readonly<Record<string, string>> = Object.freeze({
  PATH: process.env.PATH ?? '/usr/bin:/bin',
  HOME: '/nonexistent',
  LC_ALL: 'C',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_TERMINAL_PROMPT: '0',
  GIT_ASKPASS: '/bin/false',
  GIT_AUTHOR_NAME: 'Sigil canvas',
  GIT_AUTHOR_EMAIL: 'canvas@sigil.invalid',
  GIT_COMMITTER_NAME: 'Sigil canvas',
  GIT_COMMITTER_EMAIL: 'canvas@sigil.invalid',
});

export interface RunGitOptions {
  signal?: AbortSignal;
  /** Added to CANVAS_GIT_ENV (an extra header through GIT_CONFIG_*, say). */
  env?: Record<string, string>;
}

/** Runs `git args…` in `dir`; resolves with its trimmed standard output, rejects with its standard error. */
export async function runGit(
  dir: string,
  args: readonly string[],
  options: RunGitOptions = {},
): Promise<string> {
  try {
    const { stdout } = await execFileAsync('git', [...args], {
      cwd: dir,
      env: { ...CANVAS_GIT_ENV, ...options.env },
      encoding: 'utf8',
      maxBuffer: 16 * 1024 * 1024,
      ...(options.signal ? { signal: options.signal } : {}),
    });
    return stdout.trim();
  } catch (err) {
    if (options.signal?.aborted) throw options.signal.reason;
    const failure = err as NodeJS.ErrnoException & { stderr?: string };
    if (failure.code === 'ENOENT')
      throw new SigilError('unavailable', 'git is not installed on this machine', {
        hint: 'Install git (Debian: apt-get install git) to run canvas workspaces and git nodes',
        details: { reason: 'git_missing' },
      });
    throw new SigilError(
      'internal',
      `git ${args[0] ?? ''} failed: ${(failure.stderr ?? failure.message).trim()}`,
      {
        details: { reason: 'git_failed', command: args[0] },
      },
    );
  }
}

/**
 * Makes `dir` a canvas workspace: a git repository on branch `main` with one empty commit, or where
 * git is not installed a plain directory (resolves false then).
 */
export async function initWorkspace(dir: string): Promise<boolean> {
  await mkdir(dir, { recursive: true });
  try {
    await runGit(dir, ['init', '--quiet', '--initial-branch=main']);
  } catch (err) {
    if (isSigilError(err) && err.details?.reason === 'git_missing') return false;
    throw err;
  }
  await runGit(dir, ['commit', '--quiet', '--allow-empty', '-m', 'canvas workspace']);
  return true;
}
