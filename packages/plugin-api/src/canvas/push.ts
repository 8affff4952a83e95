import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CanvasNodeContextV2 } from '../contracts/canvas-node-v2.ts';
import { SigilError } from '../errors.ts';
import { requireApproval } from './approval.ts';
import { withDeadline } from './deadline.ts';
import { runGit } from './git.ts';
import { requireRemoteUrl } from './remote.ts';

/**
 * Pushing a run's workspace to a git remote, as the repository-hosting nodes do it. The commit builds
 * on the remote branch's tip: its tree is the tip's tree with the workspace's files added or replaced
 * on top (nothing on the remote is deleted), so pushing to a repository that already has content keeps
 * it. The workspace's own branch and history are left as they are: only its files are pushed.
 */

/** The trailer of every commit a node pushes: a re-run finds its key on the remote branch and pushes nothing. */
export const IDEMPOTENCY_TRAILER = 'Sigil-Idempotency-Key';

export interface PushWorkspaceRequest {
  /** The run's working tree (a git repository). */
  workspaceDir: string;
  /** The remote's URL (`https`, `http` or `git`), with no credentials in it. */
  remote: string;
  branch: string;
  /** When `branch` is missing on the remote: the remote branch it starts from (absent: a first commit). */
  base?: string;
  message: string;
  /** The node run's key, recorded as the commit's `Sigil-Idempotency-Key` trailer. */
  idempotencyKey: string;
  /** An HTTP `Authorization` header value for the remote; it reaches git through its environment only. */
  authorization?: string;
  signal: AbortSignal;
  /** Longest each exchange with the remote (ls-remote, fetch, push) may take. */
  timeoutMs: number;
}

export interface PushedWorkspace {
  /** The branch's commit holding the workspace's files. */
  commit: string;
  /** Paths that commit changed against its parent. */
  files: string[];
  /** False when an earlier call with the same key pushed it, or when the branch already held these files. */
  pushed: boolean;
}

/** What a node gives `approvedPush`'s push: the rest comes from its context. */
export type NodePushRequest = Omit<
  PushWorkspaceRequest,
  'workspaceDir' | 'idempotencyKey' | 'signal' | 'timeoutMs'
>;

/**
 * How a repository-hosting node (effect `writes`) starts its run: it refuses unless approved, and
 * stops when aborted, before anything else; then it pushes the run's workspace with this node run's
 * idempotency key and signal, each exchange with the remote bounded by `timeoutMs`.
 */
export function approvedPush(
  context: Pick<CanvasNodeContextV2, 'approvals' | 'signal' | 'workspace' | 'idempotencyKey'>,
  timeoutMs: number,
): (request: NodePushRequest) => Promise<PushedWorkspace> {
  requireApproval(context.approvals);
  context.signal.throwIfAborted();
  return (request) =>
    pushWorkspace({
      ...request,
      workspaceDir: context.workspace.dir,
      idempotencyKey: context.idempotencyKey,
      signal: context.signal,
      timeoutMs,
    });
}

/** An HTTP `Authorization` value for a forge token: Basic with a user name (GitHub's style), or Bearer. */
export function authorizationHeader(
  token: string,
  scheme: 'basic' | 'bearer',
  username = 'x-access-token',
): string {
  // The value becomes a header line: a line break in it would add headers of its own.
  if (/\p{Cc}/u.test(token) || /[\p{Cc}:]/u.test(username))
    throw new SigilError('invalid_request', 'The token or its user name holds a control character', {
      details: { reason: 'token_invalid' },
    });
  if (scheme === 'bearer') return `Bearer ${token}`;
  return `Basic ${Buffer.from(`${username}:${token}`).toString('base64')}`;
}

/** Commits the workspace's files on top of the remote branch and pushes them, once per idempotency key. */
export async function pushWorkspace(request: PushWorkspaceRequest): Promise<PushedWorkspace> {
  requireRemoteUrl(request.remote);
  // The key becomes a trailer line: a line break in it would end the trailer early.
  if (request.idempotencyKey === '' || /\p{Cc}/u.test(request.idempotencyKey))
    throw new SigilError('invalid_request', 'The idempotency key is empty or holds control characters', {
      details: { reason: 'invalid_idempotency_key' },
    });
  const dir = request.workspaceDir;
  const remote = remoteOf(request);
  const tip = await remote.tip(request.branch);
  if (tip !== undefined) {
    await remote.fetch(request.branch, tip);
    const earlier = await commitWithKey(dir, tip, request.idempotencyKey);
    if (earlier !== undefined)
      return { commit: earlier, files: await changedFiles(dir, earlier), pushed: false };
  }
  const parent = tip ?? (request.base === undefined ? undefined : await remote.baseTip(request.base));
  const tree = await workspaceTree(dir, parent);
  if (tip !== undefined && tree === (await runGit(dir, ['rev-parse', `${tip}^{tree}`])))
    return { commit: tip, files: [], pushed: false };
  const message = `${request.message.trimEnd()}\n\n${IDEMPOTENCY_TRAILER}: ${request.idempotencyKey}\n`;
  const commit = await runGit(dir, ['commit-tree', tree, ...(parent ? ['-p', parent] : []), '-m', message]);
  await remote.push(commit, request.branch, tip);
  return { commit, files: await changedFiles(dir, commit), pushed: true };
}

/** The exchanges with the remote, each bounded by the timeout and the caller's signal. */
function remoteOf(request: PushWorkspaceRequest) {
  const env = remoteEnv(request.remote, request.authorization);
  const git = (args: string[]): Promise<string> =>
    withDeadline(
      request.signal,
      request.timeoutMs,
      (signal) => runGit(request.workspaceDir, args, { env, signal }),
      () =>
        new SigilError('unavailable', `git ${args[0]} took longer than ${request.timeoutMs} ms`, {
          hint: 'The remote did not answer in time; check that it is up, or raise the timeout',
          details: { reason: 'git_timeout', command: args[0] },
        }),
    );
  const tip = async (branch: string): Promise<string | undefined> => {
    const ref = `refs/heads/${branch}`;
    const lines = await git(['ls-remote', request.remote, ref]);
    const line = lines.split('\n').find((candidate) => candidate.endsWith(`\t${ref}`));
    return line?.split('\t')[0];
  };
  const movedWhileRunning = (branch: string) =>
    new SigilError('conflict', `The remote branch ${branch} moved while the workspace was being pushed`, {
      hint: 'Run the node again: it builds on the new tip',
      details: { reason: 'remote_moved', branch },
    });
  const fetch = async (branch: string, expected: string): Promise<void> => {
    await git([
      'fetch',
      '--quiet',
      '--no-tags',
      '--no-write-fetch-head',
      request.remote,
      `refs/heads/${branch}`,
    ]);
    // The branch could have been replaced between ls-remote and fetch (a force push).
    const present = await runGit(request.workspaceDir, ['cat-file', '-e', `${expected}^{commit}`]).then(
      () => true,
      () => false,
    );
    if (!present) throw movedWhileRunning(branch);
  };
  return {
    tip,
    fetch,
    baseTip: async (base: string): Promise<string> => {
      const baseTip = await tip(base);
      if (baseTip === undefined)
        throw new SigilError('not_found', `The remote has no branch ${base} to start from`, {
          details: { reason: 'base_branch_missing', branch: base },
        });
      await fetch(base, baseTip);
      return baseTip;
    },
    /** Pushes without force: a branch that moved since `expected` is a conflict, never overwritten. */
    push: async (commit: string, branch: string, expected: string | undefined): Promise<void> => {
      try {
        await git(['push', '--quiet', request.remote, `${commit}:refs/heads/${branch}`]);
      } catch (err) {
        const now = await tip(branch);
        if (now === commit) return; // the push landed, only its answer was lost
        if (now !== expected) throw movedWhileRunning(branch);
        throw err;
      }
    },
  };
}

/**
 * git's environment for the remote: the token as an extra header for this URL only (never in the URL,
 * the argv or a config file), no redirects (the header and the operator's allow-list hold for the URL
 * given), no transport but https, http and git, and no hook of the workspace's.
 */
function remoteEnv(remote: string, authorization: string | undefined): Record<string, string> {
  const config: [string, string][] = [
    ['core.hooksPath', '/dev/null'],
    ['http.followRedirects', 'false'],
  ];
  if (authorization !== undefined)
    config.push([`http.${remote}.extraHeader`, `Authorization: ${authorization}`]);
  return {
    GIT_ALLOW_PROTOCOL: 'https:http:git',
    GIT_CONFIG_COUNT: String(config.length),
    ...Object.fromEntries(
      config.flatMap(([key, value], index) => [
        [`GIT_CONFIG_KEY_${index}`, key],
        [`GIT_CONFIG_VALUE_${index}`, value],
      ]),
    ),
  };
}

/** The commit of `tip`'s history whose trailer records `key`, if any. */
async function commitWithKey(dir: string, tip: string, key: string): Promise<string | undefined> {
  const lines = await runGit(dir, [
    'log',
    '--fixed-strings',
    `--grep=${IDEMPOTENCY_TRAILER}: ${key}`,
    `--format=%H%x00%(trailers:key=${IDEMPOTENCY_TRAILER},valueonly,separator=%x00)`,
    tip,
  ]);
  // --grep also matches a longer key; the trailer's value must be the key itself.
  for (const line of lines.split('\n')) {
    const [commit, ...keys] = line.split('\0');
    if (commit && keys.includes(key)) return commit;
  }
  return undefined;
}

/** The tree of `parent` (or an empty one) with the workspace's files added on top, in a scratch index. */
async function workspaceTree(dir: string, parent: string | undefined): Promise<string> {
  const scratch = await mkdtemp(join(tmpdir(), 'sigil-push-'));
  const env = { GIT_INDEX_FILE: join(scratch, 'index') };
  try {
    if (parent !== undefined) await runGit(dir, ['read-tree', parent], { env });
    await runGit(dir, ['add', '--ignore-removal', '--', '.'], { env });
    return await runGit(dir, ['write-tree'], { env });
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

/** Paths `commit` changed against its parent (every path, for a first commit). */
async function changedFiles(dir: string, commit: string): Promise<string[]> {
  const names = await runGit(dir, [
    'diff-tree',
    '-r',
    '-z',
    '--no-commit-id',
    '--name-only',
    '--root',
    commit,
  ]);
  return names.split('\0').filter((name) => name !== '');
}
