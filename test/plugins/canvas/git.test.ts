import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { SigilError, type CanvasNodeV2 } from '@sigil/plugin-api';
import { initWorkspace } from '@sigil/plugin-api/canvas';
import {
  approvedDecision,
  canvasTestContext,
  describeCanvasNodeKitV2,
  pluginLoader,
  type CanvasTestContextOptions,
} from '@sigil/plugin-api/kit';
import plugin from '../../../plugins/canvas/git/index.ts';
import { git, startGitDaemon, TestRepository, type GitDaemon } from '../../support/git.ts';
import { startGitHttpServer, type GitHttpServer } from '../../support/git-http.ts';
import { rejectionOf } from '../../support/rejection.ts';

/**
 * git-push against real remotes: bare repositories served by `git daemon` (receive-pack enabled) and
 * by `git http-backend` over smart HTTP, the latter requiring the vault's token.
 */
describe('canvas-git: the git-push node', () => {
  const work = mkdtempSync(join(tmpdir(), 'sigil-canvas-git-'));
  const canary = `canary-${randomUUID()}`;
  const basic = `Basic ${Buffer.from(`x-access-token:${canary}`).toString('base64')}`;
  let daemon: GitDaemon;
  let http: GitHttpServer;
  /** What the HTTP server does before it takes a push (the race test moves the branch there). */
  let raceBeforeReceivePack = () => {};

  before(async () => {
    mkdirSync(join(work, 'daemon'));
    mkdirSync(join(work, 'http'));
    daemon = await startGitDaemon(join(work, 'daemon'), { receivePack: true });
    // What the node's example pushes to, under the first allowed remote: the kit runs it.
    git(
      work,
      'init',
      '--quiet',
      '--bare',
      '--initial-branch=main',
      join(work, 'daemon', 'octo-org', 'site.git'),
    );
    http = await startGitHttpServer(join(work, 'http'), {
      authorize: (authorization) => authorization === basic || authorization === `Bearer ${canary}`,
      beforeReceivePack: () => raceBeforeReceivePack(),
    });
  });
  after(async () => {
    await daemon.stop();
    await http.close();
    rmSync(work, { recursive: true, force: true });
  });

  const load = pluginLoader(plugin, () => ({ allowedRemotes: [daemon.url, http.url], pushTimeoutMs: 1_000 }));

  /** An empty bare repository served by `root`'s server, and its directory. */
  const bareRepository = (root: 'daemon' | 'http') => {
    const name = `${randomUUID()}.git`;
    const dir = join(work, root, name);
    git(work, 'init', '--quiet', '--bare', '--initial-branch=main', dir);
    return { dir, url: `${root === 'daemon' ? daemon.url : http.url}${name}` };
  };

  /** A fresh run workspace holding `files`. */
  const workspaceWith = async (files: Record<string, string>) => {
    const dir = join(work, 'workspaces', randomUUID());
    await initWorkspace(dir);
    for (const [path, content] of Object.entries(files)) writeFileSync(join(dir, path), content);
    return dir;
  };

  /**
   * A context for `node` with parsed params, an approval, the canary in the vault's FORGE_TOKEN slot
   * and an empty workspace unless `options` say otherwise.
   */
  const contextFor = async (
    node: CanvasNodeV2,
    params: Record<string, unknown>,
    options: Partial<CanvasTestContextOptions<Record<string, unknown>>> = {},
  ) =>
    canvasTestContext({
      params: node.params.parse(params),
      approvals: [approvedDecision()],
      workspaceDir: await workspaceWith({}),
      services: {
        secret: async (slot) => {
          if (slot !== 'FORGE_TOKEN') throw new SigilError('forbidden', 'no such slot');
          return canary;
        },
      },
      ...options,
    });

  const branchTip = (bare: string, branch = 'main') => git(bare, 'rev-parse', `refs/heads/${branch}`);
  const filesAt = (bare: string, rev: string) => git(bare, 'ls-tree', '-r', '--name-only', rev).split('\n');

  // A writes node: the check of nodes that do not write does not apply.
  describeCanvasNodeKitV2(load, { expectNotApplicable: ['canvas-node.reads-change-nothing'] });

  it('refuses to push without an approved decision, asking for no token and changing nothing', async () => {
    const node = await load();
    const remote = bareRepository('daemon');
    const workspaceDir = await workspaceWith({ 'index.html': '<h1>hi</h1>' });
    let secretsAsked = 0;
    for (const approvals of [[], [{ ...approvedDecision(), approved: false }]]) {
      const { context } = await contextFor(
        node,
        { remote: remote.url },
        {
          approvals,
          workspaceDir,
          services: { secret: async () => String(++secretsAsked) },
        },
      );
      const refused = await rejectionOf(node.run(context));
      expect([refused.code, refused.details?.reason]).to.deep.equal(['forbidden', 'approval_required']);
    }
    expect(git(remote.dir, 'for-each-ref')).to.equal('');
    expect(secretsAsked).to.equal(0);
  });

  it('makes the branch on an empty remote: one commit of the workspace with the rendered message and the key', async () => {
    const node = await load();
    const remote = bareRepository('daemon');
    const workspaceDir = await workspaceWith({ 'index.html': '<h1>hi</h1>' });
    const { context, record } = await contextFor(
      node,
      { remote: remote.url, message: 'Publish {{ inputs.title }}' },
      { workspaceDir, inputs: { title: 'the page' }, idempotencyKey: 'run-1:push' },
    );
    const outputs = await node.run(context);
    expect(outputs).to.deep.equal({
      commit: branchTip(remote.dir),
      remote: remote.url,
      branch: 'main',
      files: ['index.html'],
      pushed: true,
    });
    expect(git(remote.dir, 'log', '-1', '--format=%B', 'main')).to.equal(
      'Publish the page\n\nSigil-Idempotency-Key: run-1:push',
    );
    expect(git(remote.dir, 'rev-list', '--count', 'main')).to.equal('1');
    expect(git(remote.dir, 'show', 'main:index.html')).to.equal('<h1>hi</h1>');
    // The workspace's own branch is the run's: the push leaves it where it was.
    expect(git(workspaceDir, 'rev-list', '--count', 'main')).to.equal('1');
    expect(record.logs.map((line) => line.message)).to.include(`Pushed ${String(outputs.commit)}`);
  });

  it('builds on the branch the remote has: its tip is the parent and its files stay', async () => {
    const node = await load();
    const remote = bareRepository('daemon');
    const seed = new TestRepository(join(work, 'seeds'), randomUUID());
    writeFileSync(join(seed.dir, 'README.md'), '# site\n');
    const seedTip = seed.commit('seed');
    git(seed.dir, 'push', '--quiet', remote.dir, 'main');
    const { context } = await contextFor(
      node,
      { remote: remote.url },
      { workspaceDir: await workspaceWith({ 'index.html': '<h1>hi</h1>', 'README.md': '# new\n' }) },
    );
    const outputs = await node.run(context);
    expect(git(remote.dir, 'rev-parse', 'main^')).to.equal(seedTip);
    expect(filesAt(remote.dir, 'main')).to.deep.equal(['README.md', 'index.html']);
    expect(git(remote.dir, 'show', 'main:README.md')).to.equal('# new');
    expect(outputs.files).to.deep.equal(['README.md', 'index.html']);
  });

  it('pushes once per idempotency key: a re-run finds its commit on the remote and pushes nothing', async () => {
    const node = await load();
    const remote = bareRepository('daemon');
    const workspaceDir = await workspaceWith({ 'index.html': 'first' });
    const run = async () => {
      const { context } = await contextFor(
        node,
        { remote: remote.url },
        { workspaceDir, idempotencyKey: 'run-2:push' },
      );
      return node.run(context);
    };
    const first = await run();
    // The crashed run's workspace may have changed since: the key, not the content, decides.
    writeFileSync(join(workspaceDir, 'index.html'), 'second');
    const again = await run();
    expect(again).to.deep.equal({ ...first, pushed: false });
    expect(git(remote.dir, 'rev-list', '--count', 'main')).to.equal('1');
    expect(git(remote.dir, 'show', 'main:index.html')).to.equal('first');
  });

  it('a key that only starts like an earlier one is another node run: it pushes', async () => {
    const node = await load();
    const remote = bareRepository('daemon');
    const workspaceDir = await workspaceWith({ 'index.html': 'first' });
    const keys = ['run-3:push-10', 'run-3:push-1'];
    const commits: unknown[] = [];
    for (const idempotencyKey of keys) {
      writeFileSync(join(workspaceDir, 'index.html'), idempotencyKey);
      const { context } = await contextFor(node, { remote: remote.url }, { workspaceDir, idempotencyKey });
      commits.push((await node.run(context)).commit);
    }
    expect(commits[0]).to.not.equal(commits[1]);
    expect(git(remote.dir, 'rev-list', '--count', 'main')).to.equal('2');
  });

  it('refuses an idempotency key that would break its trailer line, pushing nothing', async () => {
    const node = await load();
    const remote = bareRepository('daemon');
    const { context } = await contextFor(
      node,
      { remote: remote.url },
      { idempotencyKey: 'run\nSigil-Idempotency-Key: other' },
    );
    const refused = await rejectionOf(node.run(context));
    expect([refused.code, refused.details?.reason]).to.deep.equal([
      'invalid_request',
      'invalid_idempotency_key',
    ]);
    expect(git(remote.dir, 'for-each-ref')).to.equal('');
  });

  it('commits nothing when the branch already holds the workspace files', async () => {
    const node = await load();
    const remote = bareRepository('daemon');
    const workspaceDir = await workspaceWith({ 'index.html': 'same' });
    const outputs = [];
    for (const idempotencyKey of ['run-4:a', 'run-4:b']) {
      const { context } = await contextFor(node, { remote: remote.url }, { workspaceDir, idempotencyKey });
      outputs.push(await node.run(context));
    }
    expect(outputs[1]).to.deep.include({ commit: outputs[0]?.commit, files: [], pushed: false });
    expect(git(remote.dir, 'rev-list', '--count', 'main')).to.equal('1');
  });

  it('starts a missing branch from its base, and refuses a base the remote lacks', async () => {
    const node = await load();
    const remote = bareRepository('daemon');
    const workspaceDir = await workspaceWith({ 'a.txt': 'a' });
    const { context } = await contextFor(node, { remote: remote.url }, { workspaceDir });
    const base = await node.run(context);
    writeFileSync(join(workspaceDir, 'b.txt'), 'b');
    const params = { remote: remote.url, branch: 'sigil/feature', base: 'main' };
    const { context: onBase } = await contextFor(node, params, { workspaceDir });
    const feature = await node.run(onBase);
    expect(git(remote.dir, 'rev-parse', 'sigil/feature^')).to.equal(base.commit);
    expect(feature.files).to.deep.equal(['b.txt']);
    const { context: noBase } = await contextFor(
      node,
      { ...params, branch: 'other', base: 'gone' },
      { workspaceDir },
    );
    const refused = await rejectionOf(node.run(noBase));
    expect([refused.code, refused.details?.reason]).to.deep.equal(['not_found', 'base_branch_missing']);
    expect(git(remote.dir, 'for-each-ref', '--format=%(refname)')).to.not.include('refs/heads/other');
  });

  it('a branch that moves while the workspace is pushed is a conflict: the other commit stays', async () => {
    const node = await load();
    const remote = bareRepository('http');
    const seed = new TestRepository(join(work, 'seeds'), randomUUID());
    seed.commit('seed');
    git(seed.dir, 'push', '--quiet', remote.dir, 'main');
    const racer = seed.commit('racer');
    git(seed.dir, 'push', '--quiet', remote.dir, 'main:refs/heads/racer');
    raceBeforeReceivePack = () => {
      raceBeforeReceivePack = () => {};
      git(remote.dir, 'update-ref', 'refs/heads/main', racer);
    };
    const { context } = await contextFor(
      node,
      { remote: remote.url, tokenSlot: 'FORGE_TOKEN' },
      { workspaceDir: await workspaceWith({ 'index.html': 'mine' }) },
    );
    const refused = await rejectionOf(node.run(context));
    expect([refused.code, refused.details?.reason]).to.deep.equal(['conflict', 'remote_moved']);
    expect(branchTip(remote.dir)).to.equal(racer);
  });

  describe('over smart HTTP with a token from the vault', () => {
    it('sends the token as a header and puts it nowhere else: not in URLs, outputs, logs or the workspace', async () => {
      const node = await load();
      const remote = bareRepository('http');
      const workspaceDir = await workspaceWith({ 'index.html': 'secret-free' });
      const seen = http.requests.length;
      const { context, record } = await contextFor(
        node,
        { remote: remote.url, tokenSlot: 'FORGE_TOKEN' },
        { workspaceDir },
      );
      const outputs = await node.run(context);
      expect(outputs.commit).to.equal(branchTip(remote.dir));
      const requests = http.requests.slice(seen);
      expect(requests.map((request) => request.authorization)).to.include(basic);
      expect(JSON.stringify(requests.map((request) => request.url))).to.not.include(canary);
      expect(JSON.stringify({ outputs, record })).to.not.include(canary);
      expect(
        filesUnder(join(workspaceDir, '.git')).some((file) => readFileSync(file).includes(canary)),
      ).to.equal(false);
      expect(git(remote.dir, 'log', '--format=%B', 'main')).to.not.include(canary);
    });

    it('sends it as Bearer when asked', async () => {
      const node = await load();
      const remote = bareRepository('http');
      const seen = http.requests.length;
      const { context } = await contextFor(
        node,
        { remote: remote.url, tokenSlot: 'FORGE_TOKEN', tokenScheme: 'bearer' },
        { workspaceDir: await workspaceWith({ 'a.txt': 'a' }) },
      );
      await node.run(context);
      expect(http.requests.slice(seen).map((request) => request.authorization)).to.include(
        `Bearer ${canary}`,
      );
    });

    it('is refused without the token or with a wrong one, and the wrong token is in no error or log', async () => {
      const node = await load();
      const remote = bareRepository('http');
      const wrong = `wrong-${canary}`;
      for (const params of [{ remote: remote.url }, { remote: remote.url, tokenSlot: 'FORGE_TOKEN' }]) {
        const { context, record } = await contextFor(node, params, {
          workspaceDir: await workspaceWith({ 'a.txt': 'a' }),
          services: { secret: async () => wrong },
        });
        const refused = await rejectionOf(node.run(context));
        expect(refused.details?.reason).to.equal('git_failed');
        expect(
          JSON.stringify({ refused, message: refused.message, hint: refused.hint, record }),
        ).to.not.include(wrong);
      }
      expect(git(remote.dir, 'for-each-ref')).to.equal('');
    });

    it('refuses a token that would add header lines, sending nothing', async () => {
      const node = await load();
      const seen = http.requests.length;
      const injected = `${canary}\r\nX-Injected: 1`;
      const { context } = await contextFor(
        node,
        { remote: bareRepository('http').url, tokenSlot: 'FORGE_TOKEN' },
        { services: { secret: async () => injected } },
      );
      const refused = await rejectionOf(node.run(context));
      expect([refused.code, refused.details?.reason]).to.deep.equal(['invalid_request', 'token_invalid']);
      expect(JSON.stringify({ refused, message: refused.message })).to.not.include(canary);
      expect(http.requests.length).to.equal(seen);
    });
  });

  describe("the operator's allow-list", () => {
    const restricted = pluginLoader(plugin, () => ({ allowedRemotes: [`${http.url}allowed/`] }));
    const byDefault = pluginLoader(plugin, {});

    it('refuses at validation remotes that are not listed, not https/http/git, or carry credentials', async () => {
      const node = await restricted();
      const refusedRemotes = [
        `${http.url}other.git`,
        `${http.url}allowed-not/site.git`,
        `${http.url}allowed/../other.git`,
        `${http.url.replace('http:', 'https:')}allowed/site.git`,
        `file://${work}/http/allowed/site.git`,
        `ext::sh -c touch% /tmp/pwned`,
        `${http.url.replace('//', `//x-access-token:${canary}@`)}allowed/site.git`,
        `${http.url}allowed/site.git?token=1`,
      ];
      for (const remote of refusedRemotes) {
        const result = node.params.safeParse({ remote });
        expect(result.success, remote).to.equal(false);
        expect(
          result.error?.issues.map((issue) => issue.path.join('.')),
          remote,
        ).to.include('remote');
        expect(JSON.stringify(result.error?.issues)).to.not.include(canary);
      }
      expect(node.params.safeParse({ remote: `${http.url}allowed/site.git` }).success).to.equal(true);
      expect(
        (await byDefault()).params.safeParse({ remote: `${http.url}allowed/site.git` }).success,
      ).to.equal(false);
      expect(
        (await byDefault()).params.safeParse({ remote: 'https://github.com/octo-org/site.git' }).success,
      ).to.equal(true);
    });

    it('refuses them again when run with params that skipped validation, before any request', async () => {
      const node = await restricted();
      const seen = http.requests.length;
      const cases = [
        [`${http.url}allowed/../other.git`, 'forbidden', 'remote_not_allowed'],
        [`file://${work}/http/allowed/site.git`, 'invalid_request', 'remote_invalid'],
        [`${http.url.replace('//', `//u:${canary}@`)}allowed/x.git`, 'invalid_request', 'remote_invalid'],
      ];
      for (const [remote, code, reason] of cases) {
        const { context } = await canvasTestContext({
          params: { remote, branch: 'main', message: 'm', tokenScheme: 'basic', tokenUser: 'x-access-token' },
          approvals: [approvedDecision()],
          workspaceDir: await workspaceWith({}),
        });
        const refused = await rejectionOf(node.run(context));
        expect([refused.code, refused.details?.reason], remote).to.deep.equal([code, reason]);
        expect(JSON.stringify({ refused, message: refused.message })).to.not.include(canary);
      }
      expect(http.requests.length).to.equal(seen);
    });

    it('takes only prefixes that end in / and are https, http or git', () => {
      for (const prefix of ['file:///srv/git/', 'https://github.com', 'ssh://git@github.com/'])
        expect(plugin.config.safeParse({ allowedRemotes: [prefix] }).success, prefix).to.equal(false);
    });
  });

  describe('a remote that hangs', () => {
    let hanging: Server;
    let hangingUrl: string;
    let onRequest: () => void = () => {};
    before(async () => {
      hanging = createServer(() => onRequest());
      await new Promise<void>((resolve) => hanging.listen(0, '127.0.0.1', resolve));
      hangingUrl = `http://127.0.0.1:${(hanging.address() as AddressInfo).port}/`;
    });
    after(() => {
      hanging.closeAllConnections();
      hanging.close();
    });
    const loadHanging = pluginLoader(plugin, () => ({ allowedRemotes: [hangingUrl], pushTimeoutMs: 1_000 }));

    it('stops when the signal aborts, rejecting with its reason', async () => {
      const node = await loadHanging();
      const controller = new AbortController();
      const reason = new Error('cancelled by the owner');
      onRequest = () => controller.abort(reason);
      const { context } = await contextFor(
        node,
        { remote: `${hangingUrl}site.git` },
        { signal: controller.signal },
      );
      let rejection: unknown;
      await node.run(context).catch((err: unknown) => (rejection = err));
      expect(rejection).to.equal(reason);
    });

    it('gives up after pushTimeoutMs: unavailable, git_timeout', async () => {
      const node = await loadHanging();
      onRequest = () => {};
      const { context } = await contextFor(node, { remote: `${hangingUrl}site.git` });
      const refused = await rejectionOf(node.run(context));
      expect([refused.code, refused.details?.reason]).to.deep.equal(['unavailable', 'git_timeout']);
    });
  });

  it('declares an input port for each input its message reads, and refuses a template reading anything else', async () => {
    const node = await load();
    const params = node.params.parse({
      remote: `${daemon.url}x.git`,
      message: '{{ inputs.title }} by {{ inputs.page.author }}',
    });
    expect(Object.keys(node.ports(params).inputs)).to.deep.equal(['after', 'title', 'page']);
    expect(node.ports(params).inputs.after?.required).to.equal(false);
    const refused = node.params.safeParse({ remote: `${daemon.url}x.git`, message: '{{ runId }}' });
    expect(refused.error?.issues.map((issue) => issue.path.join('.'))).to.deep.equal(['message']);
  });
});

/** Every file below `dir`. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name));
}
