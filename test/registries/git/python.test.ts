import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import type { ResolvedPackage } from '@sigil/plugin-api';
import type { GitRegistry } from '../../../registries/git/index.ts';
import { TestRepository } from '../../support/git.ts';
import { fixturePath } from '../../support/paths.ts';
import { tempDir } from '../npm/support.ts';
import { callEcho, openGitRegistry, pythonThatBuilds } from './support.ts';
import { rejectionOf } from '../../support/rejection.ts';

const FIXTURE = fixturePath('mcp', 'python-echo-server');

describe('registry-git builds a Python MCP server from a repository into a wheel, offline', function () {
  this.timeout(120_000);
  const work = tempDir('registry-git-python');
  let repo: TestRepository;
  let registry: GitRegistry;
  let resolved: ResolvedPackage;
  let python: string;

  before(async () => {
    python = pythonThatBuilds();
    repo = new TestRepository(join(work.path, 'served'), 'python-echo').copy(FIXTURE);
    repo.commit('an MCP server in plain Python');
    repo.tag('v1.0.0');
    registry = await openGitRegistry({ cacheDir: join(work.path, 'cache'), allowBuilds: true, python });
    resolved = await registry.resolve({ name: repo.fileUrl(), range: 'v1.0.0' });
  });
  after(() => work.cleanup());

  it('runs its module with python -m, its code on PYTHONPATH, and it answers echo', async () => {
    const installed = await registry.install(resolved, { module: 'sigil_echo_server', args: [] });
    const root = registry.cache.entryDir(resolved);
    expect(installed).to.include({ version: 'v1.0.0', digest: resolved.digest, hasInstallScripts: false });
    expect(installed.launch).to.deep.equal({
      kind: 'host',
      runtime: 'python',
      root,
      args: ['-m', 'sigil_echo_server'],
      env: { PYTHONPATH: join(root, 'site'), PYTHONDONTWRITEBYTECODE: '1', PYTHONNOUSERSITE: '1' },
    });
    expect(readdirSync(join(root, 'site')).filter((name) => name.endsWith('.dist-info'))).to.have.length(1);
    const { tools, text } = await callEcho(installed.launch, 'hello from a wheel');
    expect(tools).to.deep.equal(['echo']);
    expect(text).to.equal('python says: hello from a wheel');
  });

  it('runs its console script, the only one it has when no entry point is named', async () => {
    const byName = await registry.install(resolved, { bin: 'sigil-echo-server', args: [] });
    const byDefault = await registry.install(resolved, { args: [] });
    expect(byDefault.launch).to.deep.equal(byName.launch);
    expect((await callEcho(byName.launch, 'script')).text).to.equal('python says: script');
    const missing = await rejectionOf(registry.install(resolved, { module: 'not_there', args: [] }));
    expect(missing.details?.reason).to.equal('not_found');
    expect(missing.hint).to.include('sigil_echo_server');
  });

  it('refuses to build with builds off, naming the option (build_required), and keeps nothing', async () => {
    const strict = await openGitRegistry({ cacheDir: join(work.path, 'cache-strict'), python });
    const err = await rejectionOf(strict.install(resolved, { args: [] }));
    expect(err.details?.reason).to.equal('build_required');
    expect(err.message).to.include(repo.fileUrl()).and.include('Python project');
    expect(err.hint).to.include('allowBuilds');
    expect(readdirSync(strict.cache.entries)).to.deep.equal([]);
    expect(readdirSync(strict.cache.staging)).to.deep.equal([]);
  });

  it('refuses a project with dependencies, naming them (no Python dependency is installed yet)', async () => {
    const withDeps = new TestRepository(join(work.path, 'served'), 'python-deps').copy(FIXTURE);
    const pyproject = join(withDeps.dir, 'pyproject.toml');
    writeFileSync(
      pyproject,
      readFileSync(pyproject, 'utf8').replace(
        'requires-python = ">=3.9"',
        'requires-python = ">=3.9"\ndependencies = ["httpx>=0.27"]\n[project.optional-dependencies]\ndev = ["pytest"]',
      ),
    );
    withDeps.commit('with a dependency');
    const pinned = await registry.resolve({ name: withDeps.fileUrl(), range: 'main' });
    const err = await rejectionOf(registry.install(pinned, { args: [] }));
    expect(err.details?.reason).to.equal('install_failed');
    expect(err.message).to.include('depends on httpx').and.not.include('pytest');
    expect(err.details?.requires).to.have.length(1);
  });

  it('says which build requirement is missing on this host instead of failing inside pip', async () => {
    const exotic = new TestRepository(join(work.path, 'served'), 'python-exotic').copy(FIXTURE);
    const pyproject = join(exotic.dir, 'pyproject.toml');
    writeFileSync(
      pyproject,
      readFileSync(pyproject, 'utf8')
        .replace('requires = ["setuptools>=61"]', 'requires = ["sigil-absent-backend>=1"]')
        .replace('build-backend = "setuptools.build_meta"', 'build-backend = "sigil_absent_backend"'),
    );
    exotic.commit('an exotic backend');
    const pinned = await registry.resolve({ name: exotic.fileUrl(), range: 'main' });
    const err = await rejectionOf(registry.install(pinned, { args: [] }));
    expect(err.details?.reason).to.equal('install_failed');
    expect(err.message).to.include('missing sigil-absent-backend>=1');
    expect(err.details?.missing).to.deep.equal(['sigil-absent-backend>=1']);
  });

  it('reports a setup.py as build code of the repository’s own, which ran because builds are allowed', async () => {
    const legacy = new TestRepository(join(work.path, 'served'), 'python-setup-py').copy(FIXTURE);
    const marker = join(work.path, 'setup-py-ran');
    writeFileSync(
      join(legacy.dir, 'setup.py'),
      `import pathlib\nfrom setuptools import setup\npathlib.Path(${JSON.stringify(marker)}).write_text("ran")\nsetup()\n`,
    );
    legacy.commit('with a setup.py');
    const pinned = await registry.resolve({ name: legacy.fileUrl(), range: 'main' });
    const installed = await registry.install(pinned, { module: 'sigil_echo_server', args: [] });
    expect(installed.hasInstallScripts).to.equal(true);
    expect(existsSync(marker)).to.equal(true);
    expect((await callEcho(installed.launch, 'legacy')).text).to.equal('python says: legacy');
  });
});
