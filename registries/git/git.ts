import { randomBytes } from 'node:crypto';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { GitRegistryError } from './errors.ts';
import { COMMIT_ID, type Pin, type Scheme } from './repository.ts';
import { run, tail, type RunResult } from './run.ts';

/**
 * git, run so that neither a repository nor this host's git configuration can make it run anything
 * or go anywhere it was not asked to:
 *
 * - no system or global configuration, and an empty HOME: no credential helper, `url.*.insteadOf`,
 *   `core.sshCommand`, LFS or other filter of the operator's account applies;
 * - only the transports of the allowed schemes (`protocol.allow=never` then each one by name), so a
 *   URL or a redirect cannot reach `ext::` or ssh;
 * - no hooks (`core.hooksPath` is an empty directory of ours, and our repositories have no templates),
 *   no fsmonitor, no submodule recursion, no redirects, no prompt for credentials;
 * - `LC_ALL=C`, because git's exit code (128) does not tell a missing repository from an unreachable
 *   one, and only its English message does.
 */
export interface GitOptions {
  /** The git executable. */
  git: string;
  /** An empty directory: HOME and the hooks path. */
  emptyDir: string;
  /** The only transports git may use. */
  schemes: readonly Scheme[];
  timeoutMs: number;
}

const HARDENING = [
  'submodule.recurse=false',
  'fetch.recurseSubmodules=false',
  'http.followRedirects=false',
  'credential.helper=',
  'core.fsmonitor=false',
  'gc.auto=0',
  'maintenance.auto=false',
  'transfer.fsckObjects=true',
];

export class Git {
  private readonly env: Record<string, string>;
  private readonly config: string[];

  constructor(private readonly options: GitOptions) {
    this.config = [
      'protocol.allow=never',
      ...options.schemes.map((scheme) => `protocol.${scheme}.allow=always`),
      ...HARDENING,
      `core.hooksPath=${options.emptyDir}`,
    ].flatMap((setting) => ['-c', setting]);
    this.env = {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: options.emptyDir,
      LC_ALL: 'C',
      GIT_CONFIG_NOSYSTEM: '1',
      GIT_CONFIG_GLOBAL: '/dev/null',
      GIT_TERMINAL_PROMPT: '0',
      GIT_ASKPASS: '',
      SSH_ASKPASS: '',
      GIT_PROTOCOL_FROM_USER: '0',
    };
  }

  /** Runs git with the hardening above; `env` adds to the clean environment (e.g. GIT_INDEX_FILE). */
  run(args: readonly string[], env: Record<string, string> = {}): Promise<RunResult> {
    return run(this.options.git, [...this.config, ...args], {
      env: { ...this.env, ...env },
      timeoutMs: this.options.timeoutMs,
    }).catch((err: unknown) => {
      throw new GitRegistryError('install_failed', `cannot run ${this.options.git}: ${String(err)}`, {
        hint: 'registry-git needs git on the host (Debian package git), or its path in the option git',
      });
    });
  }

  /** Like `run`, but a non-zero exit is the failure `describe` names. */
  async check(args: readonly string[], describe: string, env: Record<string, string> = {}): Promise<string> {
    const result = await this.run(args, env);
    if (result.code !== 0) throw remoteFailure(result, describe);
    return result.stdout;
  }
}

/**
 * The contract's reason for a failed git command. Its message is all git gives (exit code 128 for
 * everything): a repository or ref the remote says it lacks is `not_found`; anything else (refused
 * connection, timeout, TLS) means the answer is unknown, `unavailable`.
 */
export function remoteFailure(result: RunResult, describe: string): GitRegistryError {
  const stderr = tail(result.stderr);
  if (result.timedOut) {
    return new GitRegistryError('unavailable', `${describe}: git did not finish in time`, {
      details: { git: stderr },
    });
  }
  const missing =
    /not our ref|couldn't find remote ref|does not appear to be a git repository|repository not exported|repository '.*' not found|Repository not found|returned error: 404|no such remote ref/i;
  const reason = missing.test(result.stderr) ? 'not_found' : 'unavailable';
  return new GitRegistryError(reason, `${describe}: ${stderr || `git exited with ${result.code}`}`, {
    details: { git: stderr },
  });
}

/** One line of `git ls-remote`: a ref and the object it names (`^{}` lines: the commit a tag points at). */
export interface RemoteRef {
  ref: string;
  id: string;
}

export function parseLsRemote(stdout: string): RemoteRef[] {
  return stdout
    .split('\n')
    .map((line) => line.split('\t'))
    .filter((parts): parts is [string, string] => parts.length === 2 && COMMIT_ID.test(parts[0] ?? ''))
    .map(([id, ref]) => ({ id, ref }));
}

/**
 * The objects fetched from one repository: a bare repository of ours, shallow (only the commits
 * asked for, each with its tree), each commit kept by a ref `refs/sigil/<commit>` so nothing prunes it.
 * Fetches into one store run one at a time (git's `shallow.lock` allows no other way).
 */
export class ObjectStore {
  private queue: Promise<unknown> = Promise.resolve();
  private created: Promise<void> | undefined;

  constructor(
    private readonly git: Git,
    readonly dir: string,
    readonly url: string,
  ) {}

  /** Runs `work` after every earlier one of this store has settled. */
  exclusive<T>(work: () => Promise<T>): Promise<T> {
    const next = this.queue.then(work, work);
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** The tags and branches of the remote, in one round trip. */
  async listRefs(): Promise<RemoteRef[]> {
    return parseLsRemote(
      await this.git.check(['ls-remote', '--', this.url], `cannot list the refs of ${this.url}`),
    );
  }

  /** The commit and tree of `commit` when the store holds it; never touches the network. */
  async pinOf(commit: string): Promise<Pin | undefined> {
    await this.create();
    // `cat-file commit` would also dereference a tag object: the type is asked first.
    const type = await this.git.run(['--git-dir', this.dir, 'cat-file', '-t', commit]);
    if (type.code !== 0 || type.stdout.trim() !== 'commit') return undefined;
    const result = await this.git.run(['--git-dir', this.dir, 'cat-file', 'commit', commit]);
    // A commit object starts with the line `tree <id>`.
    const tree = /^tree ([0-9a-f]{40})\n/.exec(result.stdout)?.[1];
    return result.code === 0 && tree ? { commit, tree } : undefined;
  }

  /**
   * Fetches one commit (a commit id, or a ref such as `refs/tags/v1`), without history, and answers
   * the commit and its tree. A ref is read where git wrote what it fetched, so what is answered is
   * what is stored even if the ref moved since it was listed.
   */
  fetch(source: string): Promise<Pin> {
    return this.exclusive(async () => {
      await this.create();
      const local = `refs/sigil/fetching/${randomBytes(6).toString('hex')}`;
      await this.git.check(
        [
          '--git-dir',
          this.dir,
          'fetch',
          '--quiet',
          '--depth=1',
          '--no-tags',
          '--no-write-fetch-head',
          '--no-auto-gc',
          '--',
          this.url,
          `+${source}:${local}`,
        ],
        `cannot fetch ${source} from ${this.url}`,
      );
      const commit = (
        await this.git.check(
          ['--git-dir', this.dir, 'rev-parse', '--verify', `${local}^{commit}`],
          `cannot read ${source} fetched from ${this.url}`,
        )
      ).trim();
      await this.git.check(
        ['--git-dir', this.dir, 'update-ref', `refs/sigil/${commit}`, commit],
        'cannot keep a fetched commit',
      );
      await this.git.check(['--git-dir', this.dir, 'update-ref', '-d', local], 'cannot drop a fetch ref');
      const pin = await this.pinOf(commit);
      if (!pin) throw new GitRegistryError('install_failed', `fetched ${source} but cannot read ${commit}`);
      return pin;
    });
  }

  /**
   * Writes the files of `pin.commit` into `into` (which must not exist) and proves they are its tree:
   * the checkout is hashed back into a tree (ignore rules off, submodules as the commit records them)
   * and compared. Uses an index of its own; no ref moves, no hook or filter runs.
   */
  async checkout(pin: Pin, into: string, scratch: string): Promise<void> {
    const env = { GIT_INDEX_FILE: join(scratch, 'index') };
    const git = (args: string[], describe: string) =>
      this.git.check(['--git-dir', this.dir, '--work-tree', into, ...args], describe, env);
    await mkdir(into, { recursive: true });
    await git(['read-tree', pin.commit], `cannot read commit ${pin.commit}`);
    await git(['checkout-index', '--all', '--force'], `cannot check out ${pin.commit}`);
    // A fresh index has no stat data, so every file of the checkout is hashed again below.
    await git(['read-tree', pin.commit], `cannot read commit ${pin.commit}`);
    await git(['add', '--all', '--force', '--', '.'], `cannot hash the checkout of ${pin.commit}`);
    const tree = (await git(['write-tree'], `cannot hash the checkout of ${pin.commit}`)).trim();
    await rm(env.GIT_INDEX_FILE, { force: true });
    if (tree !== pin.tree) {
      throw new GitRegistryError(
        'integrity_mismatch',
        `the checkout of ${pin.commit} hashes to tree ${tree}, not ${pin.tree}`,
        { details: { expected: pin.tree, actual: tree } },
      );
    }
  }

  /** An empty bare repository without templates (so without hooks), made whole or not at all. */
  private create(): Promise<void> {
    this.created ??= this.createOnce().catch((err: unknown) => {
      this.created = undefined;
      throw err;
    });
    return this.created;
  }

  private async createOnce(): Promise<void> {
    const result = await this.git.run(['--git-dir', this.dir, 'rev-parse', '--git-dir']);
    if (result.code === 0) return;
    await mkdir(dirname(this.dir), { recursive: true });
    const temporary = `${this.dir}.${randomBytes(4).toString('hex')}.tmp`;
    await this.git.check(
      ['init', '--quiet', '--bare', '--template=', temporary],
      'cannot create an object store',
    );
    // Above every .gitattributes of a repository: files are checked out as their blobs' bytes, with no
    // line-ending conversion, `$Id$` expansion, filter or re-encoding, so the checkout is the commit.
    await mkdir(join(temporary, 'info'));
    await writeFile(
      join(temporary, 'info', 'attributes'),
      '* -text -eol -ident -filter -working-tree-encoding\n',
    );
    try {
      await rename(temporary, this.dir);
    } catch {
      // Another install created it first.
      await rm(temporary, { recursive: true, force: true });
    }
  }
}
