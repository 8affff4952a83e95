import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
import plugin from '../../../plugins/canvas/github/index.ts';
import { startForgeStandIn, type ForgeStandIn } from '../../support/forge-stand-in.ts';
import { git } from '../../support/git.ts';
import { rejectionOf } from '../../support/rejection.ts';

/**
 * github-pull-request against a stand-in for GitHub (test/support/forge-stand-in.ts): its REST routes
 * over real bare repositories served by `git http-backend`, both behind the wallet's token.
 */
describe('canvas-github: the github-pull-request node', () => {
  const work = mkdtempSync(join(tmpdir(), 'sigil-canvas-github-'));
  const canary = `canary-${randomUUID()}`;
  let forge: ForgeStandIn;

  before(async () => {
    forge = await startForgeStandIn(join(work, 'forge'), {
      accepts: (token) => token === canary,
      login: 'octocat',
    });
  });
  after(async () => {
    await forge.close();
    rmSync(work, { recursive: true, force: true });
  });

  const load = pluginLoader(plugin, () => ({ apiUrl: forge.apiUrl, timeoutMs: 5_000 }));
  const loadDown = pluginLoader(plugin, { apiUrl: 'http://127.0.0.1:1/api' });

  /** A context with parsed params, an approval, the token in GITHUB_TOKEN and a workspace holding `files`. */
  const contextFor = async (
    node: CanvasNodeV2,
    params: Record<string, unknown>,
    files: Record<string, string>,
    options: Partial<CanvasTestContextOptions<Record<string, unknown>>> = {},
  ) => {
    const workspaceDir = join(work, 'workspaces', randomUUID());
    await initWorkspace(workspaceDir);
    for (const [path, content] of Object.entries(files)) writeFileSync(join(workspaceDir, path), content);
    return canvasTestContext({
      params: node.params.parse(params),
      approvals: [approvedDecision()],
      workspaceDir,
      services: {
        secret: async (slot) => {
          if (slot !== 'GITHUB_TOKEN') throw new SigilError('forbidden', 'no such slot');
          return canary;
        },
      },
      ...options,
    });
  };
  const requestsSince = (seen: number) =>
    forge.requests.slice(seen).map(({ method, url }) => `${method} ${url}`);

  describe("with a stand-in that takes the kit's tokens", () => {
    // The kit answers every secret with a canary of its own (sigil-kit-canary-<random>).
    let kitForge: ForgeStandIn;
    before(async () => {
      kitForge = await startForgeStandIn(join(work, 'kit-forge'), {
        accepts: (token) => token.startsWith('sigil-kit-canary-'),
        login: 'kit',
      });
    });
    after(() => kitForge.close());
    // A writes node: the check of nodes that do not write does not apply.
    describeCanvasNodeKitV2(
      pluginLoader(plugin, () => ({ apiUrl: kitForge.apiUrl, timeoutMs: 5_000 })),
      {
        expectNotApplicable: ['canvas-node.reads-change-nothing'],
      },
    );
  });

  it('refuses without an approved decision: no token read, no request to the forge', async () => {
    const node = await load();
    const seen = forge.requests.length;
    let secretsAsked = 0;
    for (const approvals of [[], [{ ...approvedDecision(), approved: false }]]) {
      const { context } = await contextFor(
        node,
        { repo: 'refused' },
        { 'a.txt': 'a' },
        {
          approvals,
          services: { secret: async () => String(++secretsAsked) },
        },
      );
      const refused = await rejectionOf(node.run(context));
      expect([refused.code, refused.details?.reason]).to.deep.equal(['forbidden', 'approval_required']);
    }
    expect([secretsAsked, forge.requests.length]).to.deep.equal([0, seen]);
  });

  it('creates a missing repository, pushes the workspace as a branch on its first commit, and opens a pull request', async () => {
    const node = await load();
    const seen = forge.requests.length;
    const { context, record } = await contextFor(
      node,
      { repo: 'site', title: 'Publish {{ inputs.page.title }}', body: 'Approved in run {{ inputs.run }}' },
      { 'index.html': '<h1>hi</h1>' },
      { inputs: { page: { title: 'the landing page' }, run: 7 }, runId: 'run-1', nodeId: 'publish' },
    );
    const outputs = await node.run(context);
    const dir = forge.repositoryDir('octocat', 'site');
    const branch = 'sigil/run-1/publish';
    expect(outputs).to.deep.include({
      repository: 'octocat/site',
      created: true,
      branch,
      commit: git(dir, 'rev-parse', branch),
      files: ['index.html'],
      pullRequest: 1,
    });
    expect(requestsSince(seen)).to.include('POST /api/user/repos');
    expect(git(dir, 'rev-parse', `${branch}^`)).to.equal(git(dir, 'rev-parse', 'main'));
    expect(git(dir, 'ls-tree', '-r', '--name-only', branch).split('\n')).to.deep.equal([
      'README.md',
      'index.html',
    ]);
    expect(git(dir, 'log', '-1', '--format=%B', branch)).to.equal(
      'Publish the landing page\n\nApproved in run 7\n\nSigil-Idempotency-Key: run-1:publish',
    );
    expect(forge.pulls.at(-1)).to.deep.include({
      html_url: outputs.pullRequestUrl,
      title: 'Publish the landing page',
      body: 'Approved in run 7',
      head: { ref: branch, sha: outputs.commit },
    });
    expect(record.logs.map((line) => line.message)).to.include('Opened pull request #1');
  });

  it('a run that stopped after its push opens the pull request when run again, and makes nothing twice', async () => {
    const node = await load();
    const seen = forge.requests.length;
    const controller = new AbortController();
    const run = { runId: 'run-2', nodeId: 'publish', idempotencyKey: 'run-2:publish' };
    const { context } = await contextFor(
      node,
      { repo: 'blog' },
      { 'post.md': 'one' },
      {
        ...run,
        signal: controller.signal,
      },
    );
    // The run is cancelled as it asks for its pull request: the branch is pushed, no pull request opened.
    const crash = new Error('the runtime died');
    forge.onRequest = ({ url }) => {
      if (url.includes('/pulls')) controller.abort(crash);
    };
    let rejection: unknown;
    await node.run(context).catch((err: unknown) => (rejection = err));
    forge.onRequest = () => {};
    expect(rejection).to.equal(crash);
    const dir = forge.repositoryDir('octocat', 'blog');
    const pushedBeforeTheCrash = git(dir, 'rev-parse', 'sigil/run-2/publish');
    const outputs = [];
    for (const content of ['one', 'changed since']) {
      const { context: again } = await contextFor(node, { repo: 'blog' }, { 'post.md': content }, run);
      outputs.push(await node.run(again));
    }
    expect(outputs[0]).to.deep.include({
      created: false,
      commit: pushedBeforeTheCrash,
      pullRequest: forge.pulls.length,
    });
    expect(outputs[1]).to.deep.equal(outputs[0]);
    const made = requestsSince(seen).filter((request) => request.startsWith('POST /api'));
    expect(made).to.deep.equal(['POST /api/user/repos', 'POST /api/repos/octocat/blog/pulls']);
    expect(
      git(forge.repositoryDir('octocat', 'blog'), 'rev-list', '--count', 'sigil/run-2/publish'),
    ).to.equal('2');
  });

  it("uses an organization's repository and its default branch, and creates a missing one under the organization", async () => {
    const node = await load();
    const existing = forge.createRepository('octo-org', 'docs', true);
    const seen = forge.requests.length;
    const { context } = await contextFor(
      node,
      { owner: 'octo-org', repo: 'docs', branch: 'guide' },
      { 'g.md': 'g' },
    );
    expect(await node.run(context)).to.deep.include({
      repository: 'octo-org/docs',
      created: false,
      branch: 'guide',
    });
    expect(git(existing, 'rev-parse', 'guide^')).to.equal(git(existing, 'rev-parse', 'main'));
    expect(
      requestsSince(seen).filter((request) => request.includes('/repos') && request.startsWith('POST')),
    ).to.deep.equal(['POST /api/repos/octo-org/docs/pulls']);
    const { context: missing } = await contextFor(
      node,
      { owner: 'octo-org', repo: 'new-docs' },
      { 'g.md': 'g' },
    );
    expect(await node.run(missing)).to.deep.include({ repository: 'octo-org/new-docs', created: true });
    expect(requestsSince(seen)).to.include('POST /api/orgs/octo-org/repos');
  });

  it('puts the token in Authorization headers only: not in URLs, outputs, logs, commits or the workspace', async () => {
    const node = await load();
    const seen = forge.requests.length;
    const { context, record } = await contextFor(node, { repo: 'canary' }, { 'a.txt': 'a' });
    const outputs = await node.run(context);
    expect(JSON.stringify({ outputs, record, urls: requestsSince(seen) })).to.not.include(canary);
    const dir = forge.repositoryDir('octocat', 'canary');
    expect(git(dir, 'log', '--all', '--format=%B')).to.not.include(canary);
    expect(git(context.workspace.dir, 'config', '--list', '--local')).to.not.include(canary);
  });

  it('a wrong token is unauthorized, and the error does not carry it', async () => {
    const node = await load();
    const wrong = `wrong-${canary}`;
    const { context, record } = await contextFor(
      node,
      { repo: 'site' },
      { 'a.txt': 'a' },
      {
        services: { secret: async () => wrong },
      },
    );
    const refused = await rejectionOf(node.run(context));
    expect([refused.code, refused.details?.reason]).to.deep.equal(['unauthorized', 'forge_unauthorized']);
    expect(JSON.stringify({ refused, message: refused.message, record })).to.not.include(wrong);
  });

  it('refuses a branch that is its own base before pushing, and templates that read anything but inputs', async () => {
    const node = await load();
    const dir = forge.createRepository('octocat', 'same', true);
    const tip = git(dir, 'rev-parse', 'main');
    const { context } = await contextFor(node, { repo: 'same', branch: 'main' }, { 'a.txt': 'a' });
    const refused = await rejectionOf(node.run(context));
    expect([refused.code, refused.details?.reason]).to.deep.equal(['invalid_request', 'branch_is_base']);
    expect(git(dir, 'rev-parse', 'main')).to.equal(tip);
    const invalid = node.params.safeParse({ repo: 'x', title: '{{ runId }}', body: '{{ inputs }}' });
    expect(invalid.error?.issues.map((issue) => issue.path.join('.'))).to.deep.equal(['title', 'body']);
    expect(node.params.safeParse({ repo: '../etc' }).success).to.equal(false);
    const params = node.params.parse({ repo: 'x', title: '{{ inputs.title }}', body: '{{ inputs.notes }}' });
    expect(Object.keys(node.ports(params).inputs)).to.deep.equal(['after', 'title', 'notes']);
  });

  it('a forge that is down is unavailable, forge_unreachable', async () => {
    const node = await loadDown();
    const { context } = await contextFor(node, { repo: 'site' }, {});
    const refused = await rejectionOf(node.run(context));
    expect([refused.code, refused.details?.reason]).to.deep.equal(['unavailable', 'forge_unreachable']);
  });
});
