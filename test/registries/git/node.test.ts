import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import type { ResolvedPackage } from '@sigil/plugin-api';
import type { GitRegistry } from '../../../registries/git/index.ts';
import { git, startGitDaemon, TestRepository, type GitDaemon } from '../../support/git.ts';
import { fixturePath } from '../../support/paths.ts';
import { startVerdaccio, type Verdaccio } from '../../support/verdaccio.ts';
import { tempDir, writePackage } from '../npm/support.ts';
import { recordingLogger } from '../../support/logs.ts';
import { callEcho, openGitRegistry, tamperStoredBlob } from './support.ts';
import { rejectionOf } from '../../support/rejection.ts';

const entry = { args: [] as string[] };

describe('registry-git installs a Node MCP server from a repository, its dependencies from verdaccio', function () {
  this.timeout(120_000);
  const work = tempDir('registry-git-node');
  const served = join(work.path, 'served');
  const marker = join(work.path, 'install-script-ran');
  let verdaccio: Verdaccio;
  let daemon: GitDaemon;
  let repo: TestRepository;
  let registry: GitRegistry;
  let url: string;
  let v1: ResolvedPackage;

  before(async () => {
    // Only packages published here: no uplink, so nothing comes from the public registry.
    verdaccio = await startVerdaccio({
      uplink: false,
      packages: [{ dir: fixturePath('mcp', 'echo-format-package') }],
    });
    repo = new TestRepository(served, 'node-echo.git').copy(fixturePath('mcp', 'node-echo-server'));
    // An install script the plugin must report and never run.
    const manifest = JSON.parse(readFileSync(join(repo.dir, 'package.json'), 'utf8')) as Record<
      string,
      unknown
    >;
    manifest.scripts = { postinstall: `node -e "require('fs').writeFileSync('${marker}', 'ran')"` };
    writeFileSync(join(repo.dir, 'package.json'), JSON.stringify(manifest, null, 2));
    repo.commit('an MCP server in plain Node');
    repo.tag('v1.0.0');
    daemon = await startGitDaemon(served);
    url = `${daemon.url}node-echo.git`;
    registry = await openGitRegistry({ cacheDir: join(work.path, 'cache'), npmRegistry: verdaccio.url });
    v1 = await registry.resolve({ name: url, range: 'v1.0.0' });
  });
  after(async () => {
    await daemon?.stop();
    await verdaccio?.stop();
    work.cleanup();
  });

  it('checks out the pinned commit, installs its dependency with scripts off, and the server answers echo', async () => {
    const installed = await registry.install(v1, entry);
    const root = registry.cache.entryDir(v1);
    expect(root, 'the entry is named after the pinned commit').to.include(
      repo.commitOf('v1.0.0').slice(0, 16),
    );
    expect(installed).to.include({
      name: url,
      version: 'v1.0.0',
      digest: v1.digest,
      hasInstallScripts: true,
    });
    expect(installed.sizeBytes).to.be.greaterThan(0);
    expect(installed.launch).to.deep.equal({
      kind: 'host',
      runtime: 'node',
      root,
      args: [join(root, 'src', 'server.js')],
    });
    expect(existsSync(join(root, 'src', 'node_modules', 'sigil-test-echo-format', 'index.js'))).to.equal(
      true,
    );
    expect(existsSync(marker), 'the postinstall script ran').to.equal(false);
    const { tools, text } = await callEcho(installed.launch, 'hello from git');
    expect(tools).to.deep.equal(['echo']);
    expect(text).to.equal('node says: hello from git');
  });

  it('answers a second install from the cache, with the catalog arguments after the program', async () => {
    const first = await registry.install(v1, entry);
    const again = await registry.install(v1, { bin: 'sigil-node-echo', args: ['--flag'] });
    expect(again.installedAt).to.equal(first.installedAt);
    expect(again.launch.args).to.deep.equal([...first.launch.args, '--flag']);
    const byPath = await registry.install(v1, { path: 'server.js', args: [] });
    expect(byPath.launch.args).to.deep.equal(first.launch.args);
  });

  it('installs from the cache with the repository and the npm registry both unreachable', async () => {
    const cacheDir = join(work.path, 'cache-offline');
    const secondDaemon = await startGitDaemon(served);
    const offlineUrl = `${secondDaemon.url}node-echo.git`;
    const online = await openGitRegistry({ cacheDir, npmRegistry: verdaccio.url });
    const pinned = await online.resolve({ name: offlineUrl, range: 'v1.0.0' });
    await online.install(pinned, entry);
    await secondDaemon.stop();
    // A restarted gateway: the registry URL now points nowhere, and git cannot reach the repository.
    const restarted = await openGitRegistry({ cacheDir, npmRegistry: 'http://127.0.0.1:1/' });
    expect(await restarted.resolve({ name: offlineUrl, range: 'v1.0.0' })).to.deep.equal(pinned);
    const installed = await restarted.install(pinned, entry);
    expect((await callEcho(installed.launch, 'offline')).text).to.equal('node says: offline');
  });

  it('honours package-lock.json (npm ci): the locked version, from the configured registry whatever host it names', async () => {
    const locked = new TestRepository(served, 'node-locked.git').copy(fixturePath('mcp', 'node-echo-server'));
    // The lockfile npm writes against this registry, then a newer dependency in range is published.
    const npmrc = join(work.path, 'lock-npmrc');
    writeFileSync(npmrc, '');
    execFileSync(
      'npm',
      [
        'install',
        '--package-lock-only',
        '--ignore-scripts',
        `--registry=${verdaccio.url}`,
        `--userconfig=${npmrc}`,
      ],
      { cwd: locked.dir, env: { PATH: process.env.PATH, HOME: work.path }, stdio: 'ignore' },
    );
    // Written against another registry: every resolved URL is read as the configured registry's.
    const lockFile = join(locked.dir, 'package-lock.json');
    writeFileSync(
      lockFile,
      readFileSync(lockFile, 'utf8').replaceAll(verdaccio.url, 'https://elsewhere.invalid/'),
    );
    locked.commit('with a lockfile');
    locked.tag('v1.0.0');
    await verdaccio.publish({
      dir: writePackage(
        join(work.path, 'echo-format-1.0.1'),
        { name: 'sigil-test-echo-format', version: '1.0.1', main: 'index.js' },
        { 'index.js': 'module.exports = (message) => `newer: ${message}`;\n' },
      ),
    });
    const { logger, lines } = recordingLogger();
    const withLog = await openGitRegistry({
      cacheDir: join(work.path, 'cache-lock'),
      npmRegistry: verdaccio.url,
      logger,
    });
    const resolved = await withLog.resolve({ name: `${daemon.url}node-locked.git`, range: 'v1.0.0' });
    const installed = await withLog.install(resolved, entry);
    expect((await callEcho(installed.launch, 'locked')).text).to.equal('node says: locked');
    expect(installed.hasInstallScripts).to.equal(false);
    expect(lines.find((line) => line.msg.startsWith('installed Node dependencies'))).to.include({
      lockfile: 'package-lock.json',
      packages: 1,
    });
    // Without the lockfile the same repository gets the newer version: the lockfile made the difference.
    const unlocked = new TestRepository(served, 'node-unlocked.git').copy(
      fixturePath('mcp', 'node-echo-server'),
    );
    unlocked.commit('no lockfile');
    const latest = await withLog.resolve({ name: `${daemon.url}node-unlocked.git`, range: 'main' });
    expect((await callEcho((await withLog.install(latest, entry)).launch, 'x')).text).to.equal('newer: x');
  });

  it('refuses a digest whose tree is not the commit’s, leaving nothing in the cache', async () => {
    const forged = { ...v1, digest: `git:${repo.commitOf('v1.0.0')};tree:${'0'.repeat(40)}` };
    const err = await rejectionOf(registry.install(forged, entry));
    expect(err.details?.reason).to.equal('integrity_mismatch');
    expect(err.code).to.equal('conflict');
    expect((await registry.cacheStatus()).entries.map((e) => e.digest)).to.not.include(forged.digest);
    expect(readdirSync(registry.cache.staging)).to.deep.equal([]);
  });

  it('refuses a checkout whose stored objects were altered after resolve, and keeps nothing', async () => {
    const cacheDir = join(work.path, 'cache-tampered');
    const first = await openGitRegistry({ cacheDir, npmRegistry: verdaccio.url });
    const pinned = await first.resolve({ name: url, range: 'v1.0.0' });
    tamperStoredBlob(
      first.cache.repository(url),
      git(repo.dir, 'rev-parse', 'v1.0.0:server.js'),
      'process.exit(0);\n',
    );
    const err = await rejectionOf(first.install(pinned, entry));
    expect(err.details?.reason).to.equal('integrity_mismatch');
    expect(err.message).to.include(`not ${repo.treeOf('v1.0.0')}`);
    expect(readdirSync(first.cache.entries)).to.deep.equal([]);
    expect(readdirSync(first.cache.staging)).to.deep.equal([]);
  });

  it('refuses a pinned tag that moved to another commit when the pinned one is gone, never following it', async () => {
    const moving = new TestRepository(served, 'node-moving.git').copy(fixturePath('mcp', 'node-echo-server'));
    moving.commit('one');
    moving.tag('v1');
    const fresh = await openGitRegistry({
      cacheDir: join(work.path, 'cache-moving'),
      npmRegistry: verdaccio.url,
    });
    const pinned = await fresh.resolve({ name: `${daemon.url}node-moving.git`, range: 'v1' });
    // The commit rewritten and the tag forced onto the rewrite: the pinned commit is gone from the repository.
    writeFileSync(join(moving.dir, 'README.md'), 'rewritten\n');
    git(moving.dir, 'add', '--all');
    git(moving.dir, 'commit', '--quiet', '--amend', '-m', 'one, rewritten');
    moving.tag('v1', true);
    git(moving.dir, 'reflog', 'expire', '--expire=now', '--all');
    git(moving.dir, 'gc', '--quiet', '--prune=now');
    // Another cache, which never fetched the pinned commit, is asked to install it.
    const other = await openGitRegistry({
      cacheDir: join(work.path, 'cache-moving-2'),
      npmRegistry: verdaccio.url,
    });
    const err = await rejectionOf(other.install(pinned, entry));
    expect(err.details?.reason).to.equal('integrity_mismatch');
    expect(err.message).to.include(`the tag now names commit ${moving.head()}`);
    expect(readdirSync(other.cache.entries)).to.deep.equal([]);
  });

  it('answers not_found for an entry point the repository lacks, listing those it has', async () => {
    const err = await rejectionOf(registry.install(v1, { bin: 'nope', args: [] }));
    expect(err.details?.reason).to.equal('not_found');
    expect(err.hint).to.include('sigil-node-echo');
    const outside = await rejectionOf(registry.install(v1, { path: '/etc/passwd', args: [] }));
    expect(outside.details?.reason).to.equal('not_found');
    expect(outside.message).to.include('outside the repository');
  });

  it('refuses dependencies from git, URLs or paths before npm runs', async () => {
    const gitDep = new TestRepository(served, 'node-gitdep.git');
    writePackage(gitDep.dir, {
      name: 'sigil-test-gitdep',
      version: '1.0.0',
      bin: 'index.js',
      dependencies: { evil: 'git+https://example.com/evil.git', local: 'file:../elsewhere' },
    });
    gitDep.commit('a git dependency');
    const resolved = await registry.resolve({ name: `${daemon.url}node-gitdep.git`, range: 'main' });
    const err = await rejectionOf(registry.install(resolved, entry));
    expect(err.details?.reason).to.equal('install_failed');
    expect(err.message).to.include('dependencies.evil').and.include('dependencies.local');
  });

  it('says what it looked for when the repository is neither a Node nor a Python project', async () => {
    const plain = new TestRepository(served, 'plain.git');
    writeFileSync(join(plain.dir, 'README.md'), 'nothing to build\n');
    plain.commit('just a readme');
    const resolved = await registry.resolve({ name: `${daemon.url}plain.git`, range: 'main' });
    const err = await rejectionOf(registry.install(resolved, entry));
    expect(err.details?.reason).to.equal('install_failed');
    expect(err.message).to.include('package.json').and.include('pyproject.toml');
  });

  it('checks out a repository with a submodule without fetching the submodule, and verifies its tree', async () => {
    const outer = new TestRepository(served, 'node-submodule.git').copy(
      fixturePath('mcp', 'node-echo-server'),
    );
    // A submodule as a commit records it: a gitlink and .gitmodules, pointing at a repository it must not fetch.
    writeFileSync(
      join(outer.dir, '.gitmodules'),
      '[submodule "vendored"]\n\tpath = vendored\n\turl = git://127.0.0.1:1/x.git\n',
    );
    git(outer.dir, 'update-index', '--add', '--cacheinfo', `160000,${repo.commitOf('v1.0.0')},vendored`);
    outer.commit('with a submodule');
    const resolved = await registry.resolve({ name: `${daemon.url}node-submodule.git`, range: 'main' });
    const installed = await registry.install(resolved, entry);
    const src = join(registry.cache.entryDir(resolved), 'src');
    // checkout-index leaves an unpopulated submodule out; the tree still matched, gitlink included.
    expect(existsSync(join(src, 'vendored', 'package.json'))).to.equal(false);
    expect(existsSync(join(src, '.gitmodules'))).to.equal(true);
    // Either version of the dependency in range: an earlier test published a newer one.
    expect((await callEcho(installed.launch, 'outer')).text).to.match(/: outer$/);
  });

  it('checks out files as their committed bytes, whatever the repository’s .gitattributes ask', async () => {
    const attributed = new TestRepository(served, 'node-attributes.git').copy(
      fixturePath('mcp', 'node-echo-server'),
    );
    const notes = 'line one\nrevision $Id$\n';
    writeFileSync(join(attributed.dir, 'notes.txt'), notes);
    writeFileSync(join(attributed.dir, '.gitattributes'), '* text eol=crlf\nnotes.txt ident\n');
    attributed.commit('attributes that would rewrite files at checkout');
    const resolved = await registry.resolve({ name: `${daemon.url}node-attributes.git`, range: 'main' });
    await registry.install(resolved, entry);
    expect(readFileSync(join(registry.cache.entryDir(resolved), 'src', 'notes.txt'), 'utf8')).to.equal(notes);
  });

  it('reports its entries and their bytes in cacheStatus', async () => {
    const status = await registry.cacheStatus();
    const entry = status.entries.find((e) => e.name === url && e.version === 'v1.0.0');
    expect(entry).to.include({ digest: v1.digest, hasInstallScripts: true });
    expect(status.bytes).to.equal(status.entries.reduce((sum, e) => sum + e.sizeBytes, 0));
  });
});
