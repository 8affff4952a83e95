import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { cpSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from './cli.ts';

/**
 * Real Git repositories for tests: made with the git command in a directory of the test's, committed
 * and tagged, and served by a real `git daemon` on 127.0.0.1 (or read through file://).
 */

/** git with no configuration of this machine's and a fixed identity, so commits are reproducible enough. */
export const GIT_ENV = {
  PATH: process.env.PATH ?? '/usr/bin:/bin',
  HOME: '/nonexistent',
  LC_ALL: 'C',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
  GIT_AUTHOR_NAME: 'Sigil Test',
  GIT_AUTHOR_EMAIL: 'test@sigil.invalid',
  GIT_COMMITTER_NAME: 'Sigil Test',
  GIT_COMMITTER_EMAIL: 'test@sigil.invalid',
};

export function git(dir: string, ...args: string[]): string {
  return execFileSync('git', args, { cwd: dir, env: GIT_ENV, encoding: 'utf8' }).trim();
}

/** A working repository under `parent/name` on branch `main`. */
export class TestRepository {
  readonly dir: string;

  constructor(
    parent: string,
    readonly name: string,
  ) {
    this.dir = join(parent, name);
    mkdirSync(this.dir, { recursive: true });
    git(this.dir, 'init', '--quiet', '--initial-branch=main');
  }

  /** Copies `from` (a fixture directory) into the working tree. */
  copy(from: string): this {
    cpSync(from, this.dir, { recursive: true });
    return this;
  }

  /** Commits everything in the working tree; resolves with the commit id. */
  commit(message: string): string {
    git(this.dir, 'add', '--all');
    git(this.dir, 'commit', '--quiet', '--allow-empty', '-m', message);
    return this.head();
  }

  /** An annotated tag at HEAD (`force` moves an existing one). */
  tag(name: string, force = false): void {
    git(this.dir, 'tag', ...(force ? ['--force'] : []), '-a', '-m', name, name);
  }

  head(): string {
    return git(this.dir, 'rev-parse', 'HEAD');
  }

  treeOf(rev: string): string {
    return git(this.dir, 'rev-parse', `${rev}^{tree}`);
  }

  commitOf(rev: string): string {
    return git(this.dir, 'rev-parse', `${rev}^{commit}`);
  }

  fileUrl(): string {
    return `file://${this.dir}`;
  }
}

export interface GitDaemon {
  /** `git://127.0.0.1:<port>/`: a repository's URL is this and its directory's name. */
  url: string;
  port: number;
  stop(): Promise<void>;
}

/**
 * `git daemon` serving every repository under `basePath`, on a free loopback port: read-only unless
 * `receivePack` (pushes) is set. Resolves once it says it listens ("Ready to rumble", printed with
 * --verbose after it bound the port).
 */
export async function startGitDaemon(
  basePath: string,
  { receivePack = false }: { receivePack?: boolean } = {},
): Promise<GitDaemon> {
  for (let attempt = 1; ; attempt += 1) {
    const port = await freePort();
    const child = spawn(
      'git',
      [
        'daemon',
        `--base-path=${basePath}`,
        '--export-all',
        '--reuseaddr',
        '--verbose',
        '--listen=127.0.0.1',
        `--port=${port}`,
        ...(receivePack ? ['--enable=receive-pack'] : []),
      ],
      { env: GIT_ENV, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    try {
      await ready(child);
    } catch (err) {
      await stop(child);
      // The port was free when picked and could be taken before the daemon bound it: try another.
      if (attempt >= 3) throw err;
      continue;
    }
    const kill = () => child.kill('SIGKILL');
    process.once('exit', kill);
    return {
      url: `git://127.0.0.1:${port}/`,
      port,
      stop: async () => {
        process.off('exit', kill);
        await stop(child);
      },
    };
  }
}

function ready(child: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    let output = '';
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('Ready to rumble')) {
        child.stderr?.off('data', onData);
        child.off('exit', onExit);
        // Keep reading, so a chatty daemon never blocks on a full pipe.
        child.stderr?.resume();
        resolve();
      }
    };
    const onExit = (code: number | null) => reject(new Error(`git daemon exited (${code}): ${output}`));
    child.stderr?.on('data', onData);
    child.once('exit', onExit);
  });
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}
