import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { type CanvasApprovalV2, type CanvasNodeV2, isSigilError } from '@sigil/plugin-api';
import { initWorkspace, runGit } from '@sigil/plugin-api/canvas';
import {
  approvedDecision,
  canvasTestContext,
  type CanvasTestContextOptions,
  describePluginKit,
  pluginLoader,
} from '@sigil/plugin-api/kit';
import * as workspaceModule from '../../../plugins/canvas/workspace/index.ts';

const APPROVED = [approvedDecision()];

interface Ran {
  outputs?: Record<string, unknown>;
  error?: unknown;
  logs: string[];
}

describe('canvas-workspace (write-files)', function () {
  this.timeout(60_000);

  describePluginKit(
    workspaceModule,
    {},
    // A writes node, and it is given no secret.
    { expectNotApplicable: ['canvas-node.reads-change-nothing', 'canvas-node.no-secret'] },
  );

  const load = pluginLoader(workspaceModule.default, () => options);
  let options: Record<string, unknown> = {};
  let work: string;
  let dir: string;
  let node: CanvasNodeV2;

  beforeEach(async () => {
    options = {};
    work = await mkdtemp(join(tmpdir(), 'sigil-write-files-'));
    dir = join(work, 'workspace');
    // A folder of its own around the workspace: what is outside it is there to stay untouched.
    await initWorkspace(dir);
    node = await load();
  });
  afterEach(() => rm(work, { recursive: true, force: true }));

  /** Runs the node in the test's workspace; params are parsed as the executor parses them. */
  async function run(
    params: Record<string, unknown>,
    more: Partial<CanvasTestContextOptions<Record<string, unknown>>> = {},
    instance = node,
  ): Promise<Ran> {
    const { context, record } = await canvasTestContext({
      params: instance.params.parse(params),
      approvals: APPROVED,
      workspaceDir: dir,
      ...more,
    });
    const logs = () => record.logs.map((line) => line.message);
    try {
      return { outputs: await instance.run(context), logs: logs() };
    } catch (error) {
      return { error, logs: logs() };
    }
  }

  const git = (...args: string[]) => runGit(dir, args);
  const commits = async () => (await git('rev-list', '--count', 'HEAD')).trim();
  const reasonOf = (error: unknown) =>
    isSigilError(error) ? { code: error.code, reason: error.details?.reason } : { thrown: String(error) };

  it('writes the files of its input and its params (templates rendered), and commits exactly them', async () => {
    const { outputs, logs } = await run(
      {
        files: [{ path: 'site/index.html', content: '<h1>{{ inputs.page.title }}</h1>' }],
        message: 'Publish',
      },
      {
        inputs: { page: { title: 'Hello' }, files: [{ path: 'notes.md', content: '# Notes\n' }] },
        idempotencyKey: 'run-1:write',
      },
    );
    expect(outputs).to.deep.equal({
      files: ['notes.md', 'site/index.html'],
      commit: await git('rev-parse', 'HEAD'),
    });
    expect(await readFile(join(dir, 'site/index.html'), 'utf8')).to.equal('<h1>Hello</h1>');
    expect(await git('log', '-1', '--format=%B')).to.equal('Publish\n\nSigil-Idempotency-Key: run-1:write');
    expect((await git('show', '--name-only', '--format=', 'HEAD')).split('\n')).to.deep.equal([
      'notes.md',
      'site/index.html',
    ]);
    expect(await git('status', '--porcelain')).to.equal('');
    expect(logs).to.deep.equal(['writing 2 file(s)', 'committed']);
  });

  it('declares the inputs its templates read, and needs the files input only without files of its own', () => {
    const templated = node.params.parse({
      files: [{ path: 'a.txt', content: '{{ inputs.title }} {{ inputs.body.text }}' }],
    });
    expect(node.ports(templated).inputs).to.deep.include({
      title: { type: 'json', description: 'Read by a template of params.files' },
      body: { type: 'json', description: 'Read by a template of params.files' },
    });
    expect(node.ports(templated).inputs.files?.required).to.equal(false);
    expect(node.ports(node.params.parse({})).inputs.files?.required).to.equal(true);
  });

  it('commits once per idempotency key: a second run with the key finds its commit and writes nothing', async () => {
    const params = { files: [{ path: 'page.html', content: 'first' }] };
    const first = await run(params, { idempotencyKey: 'run-1:write' });
    await writeFile(join(dir, 'page.html'), 'changed since');
    const again = await run(params, { idempotencyKey: 'run-1:write' });
    expect(again.outputs).to.deep.equal(first.outputs);
    expect(again.logs).to.deep.equal(['already committed under this idempotency key; nothing written']);
    expect(await readFile(join(dir, 'page.html'), 'utf8')).to.equal('changed since');
    expect(await commits()).to.equal('2');
    // A key that only begins like the first is another key.
    const other = await run(params, { idempotencyKey: 'run-1:writ' });
    expect(other.outputs?.commit).to.not.equal(first.outputs?.commit);
    expect(await commits()).to.equal('3');
  });

  it('refuses without an approval, or with one rejected, before touching anything', async () => {
    const rejected: CanvasApprovalV2 = { ...approvedDecision(), approved: false };
    for (const approvals of [[], [rejected], [...APPROVED, rejected]]) {
      const { error } = await run({ files: [{ path: 'page.html', content: 'x' }] }, { approvals });
      expect(reasonOf(error)).to.deep.equal({ code: 'forbidden', reason: 'approval_required' });
    }
    expect(existsSync(join(dir, 'page.html'))).to.equal(false);
    expect(await commits()).to.equal('1');
  });

  it('follows no symbolic link, in a folder of the path or as the file, and writes nothing of the run', async () => {
    const outside = join(work, 'outside');
    await mkdir(outside);
    await writeFile(join(outside, 'secret.txt'), 'kept');
    await symlink(outside, join(dir, 'out'));
    await symlink(join(outside, 'secret.txt'), join(dir, 'page.html'));
    for (const path of ['out/evil.txt', 'page.html']) {
      const { error } = await run({
        files: [
          { path: 'first.txt', content: 'would be written first' },
          { path, content: 'overwritten' },
        ],
      });
      expect(reasonOf(error)).to.deep.equal({ code: 'forbidden', reason: 'symlink_in_path' });
    }
    expect(existsSync(join(outside, 'evil.txt'))).to.equal(false);
    expect(await readFile(join(outside, 'secret.txt'), 'utf8')).to.equal('kept');
    expect(existsSync(join(dir, 'first.txt'))).to.equal(false);
    expect(await commits()).to.equal('1');
  });

  it('takes paths as names, never as patterns or pathspec magic, and commits none of the files it did not write', async () => {
    await writeFile(join(dir, 'staged.txt'), 'staged by someone else');
    await git('add', 'staged.txt');
    await writeFile(join(dir, 'untracked.txt'), 'not ours');
    const path = ':(glob)*.txt';
    const { outputs } = await run({ files: [{ path, content: 'a file of that name' }] });
    expect(outputs?.files).to.deep.equal([path]);
    expect(await git('show', '--name-only', '--format=', 'HEAD')).to.equal(path);
    expect(await git('status', '--porcelain')).to.equal('A  staged.txt\n?? untracked.txt');
  });

  it("keeps to the operator's limits on files and bytes, writing nothing past them", async () => {
    options = { maxFiles: 1, maxBytes: 4 };
    const limited = await load();
    const two = await run(
      {
        files: [
          { path: 'a', content: 'a' },
          { path: 'b', content: 'b' },
        ],
      },
      {},
      limited,
    );
    expect(reasonOf(two.error)).to.deep.equal({ code: 'payload_too_large', reason: 'too_many_files' });
    const big = await run({ files: [{ path: 'a', content: 'ééé' }] }, {}, limited);
    expect(reasonOf(big.error)).to.deep.equal({ code: 'payload_too_large', reason: 'too_many_bytes' });
    expect(existsSync(join(dir, 'a'))).to.equal(false);
  });

  it('refuses a path out of the workspace, a template reading what is no input, a path twice, at validation', () => {
    const issues = (params: unknown) =>
      node.params.safeParse(params).error?.issues.map((issue) => issue.path.join('.'));
    expect(issues({ files: [{ path: '../escape', content: '' }] })).to.deep.equal(['files.0.path']);
    expect(issues({ files: [{ path: '.git/hooks/post-commit', content: '' }] })).to.deep.equal([
      'files.0.path',
    ]);
    expect(issues({ files: [{ path: 'a', content: '{{ params.token }}' }] })).to.deep.equal([
      'files.0.content',
    ]);
    expect(
      issues({
        files: [
          { path: 'a', content: '' },
          { path: 'a', content: '' },
        ],
      }),
    ).to.deep.equal(['files.1.path']);
    expect(issues({ message: 'two\nlines' })).to.deep.equal(['message']);
  });

  it('refuses a path given twice, once on the input and once in params, and input files that are not files', async () => {
    const twice = await run(
      { files: [{ path: 'a.txt', content: 'params' }] },
      { inputs: { files: [{ path: 'a.txt', content: 'input' }] } },
    );
    expect(reasonOf(twice.error)).to.deep.equal({ code: 'invalid_request', reason: 'duplicate_path' });
    const escaping = await run({}, { inputs: { files: [{ path: '../../etc/x', content: 'x' }] } });
    expect(reasonOf(escaping.error)).to.deep.equal({ code: 'invalid_request', reason: 'invalid_input' });
    expect(await commits()).to.equal('1');
  });

  it("rejects with the signal's reason once it aborted, writing nothing", async () => {
    const controller = new AbortController();
    const reason = new Error('cancelled');
    controller.abort(reason);
    const { error } = await run({ files: [{ path: 'a.txt', content: 'x' }] }, { signal: controller.signal });
    expect(error).to.equal(reason);
    expect(existsSync(join(dir, 'a.txt'))).to.equal(false);
  });

  it('lets two runs write into one workspace at once, taking turns at git', async () => {
    const [a, b] = await Promise.all([
      run({ files: [{ path: 'a.txt', content: 'a' }] }, { idempotencyKey: 'run:a' }),
      run({ files: [{ path: 'b.txt', content: 'b' }] }, { idempotencyKey: 'run:b' }),
    ]);
    expect(a.error ?? b.error).to.equal(undefined);
    expect(await commits()).to.equal('3');
    expect(await git('status', '--porcelain')).to.equal('');
  });
});
