import { expect } from 'chai';
import { extensionPoints } from '@sigil/plugin-api';
import { pluginEntrySchema } from '../../../core/config/schema.ts';
import { openDatabase } from '../../../core/db/database.ts';
import { PluginHost } from '../../../core/plugins/host.ts';
import type { GitRegistry } from '../../../registries/git/index.ts';
import { builtinPlugins } from '../../../services/builtin-plugins.ts';
import { startGitDaemon, TestRepository, type GitDaemon } from '../../support/git.ts';
import { quietLogger, testCoreServices } from '../../support/kernel.ts';
import { tempDir } from '../npm/support.ts';
import { recordingLogger } from '../../support/logs.ts';
import { openGitRegistry } from './support.ts';
import { rejectionOf } from '../../support/rejection.ts';

describe('registry-git resolves tags, branches and commits to a commit and its tree', function () {
  this.timeout(60_000);
  const work = tempDir('registry-git-resolve');
  const served = `${work.path}/served`;
  let daemon: GitDaemon;
  let repo: TestRepository;
  let registry: GitRegistry;
  let url: string;

  before(async () => {
    repo = new TestRepository(served, 'tools.git');
    repo.copy(new URL('../../fixtures/mcp/echo-format-package', import.meta.url).pathname);
    repo.commit('first');
    repo.tag('v1.0.0');
    repo.commit('second');
    daemon = await startGitDaemon(served);
    url = `${daemon.url}tools.git`;
    registry = await openGitRegistry({ cacheDir: `${work.path}/cache` });
  });
  after(async () => {
    await daemon?.stop();
    work.cleanup();
  });

  it('resolves a tag served by git daemon to version = the tag, digest = git:<commit>;tree:<tree>', async () => {
    const resolved = await registry.resolve({ name: url, range: 'v1.0.0' });
    expect(resolved).to.deep.equal({
      name: url,
      version: 'v1.0.0',
      // What `git rev-parse v1.0.0^{commit}` and `v1.0.0^{tree}` print in the repository itself.
      digest: `git:${repo.commitOf('v1.0.0')};tree:${repo.treeOf('v1.0.0')}`,
    });
  });

  it('resolves a branch to its commit id as the version, so a moved branch is a new version', async () => {
    const before = await registry.resolve({ name: url, range: 'main' });
    expect(before.version).to.equal(repo.head());
    expect(await registry.resolve({ name: url, range: 'HEAD' })).to.deep.equal(before);
    expect(before.digest).to.equal(`git:${repo.head()};tree:${repo.treeOf('HEAD')}`);
    repo.commit('third');
    const after = await registry.resolve({ name: url, range: 'main' });
    expect(after.version).to.equal(repo.head()).and.not.equal(before.version);
  });

  it('resolves a full commit id to itself, also one that no ref points at', async () => {
    const first = repo.commitOf('v1.0.0~0');
    const older = await registry.resolve({ name: url, range: repo.commitOf('HEAD~1') });
    expect(older.version).to.equal(repo.commitOf('HEAD~1'));
    const tagged = await registry.resolve({ name: url, range: first });
    expect(tagged).to.deep.equal({
      name: url,
      version: first,
      digest: `git:${first};tree:${repo.treeOf(first)}`,
    });
  });

  it('reads file:// repositories the same way', async () => {
    const resolved = await registry.resolve({ name: repo.fileUrl(), range: 'v1.0.0' });
    expect(resolved.digest).to.equal(`git:${repo.commitOf('v1.0.0')};tree:${repo.treeOf('v1.0.0')}`);
  });

  it('gives a tag that moved another digest for the same version, and logs that it moved', async () => {
    const { logger, lines } = recordingLogger();
    const watching = await openGitRegistry({ cacheDir: `${work.path}/cache-moved`, logger });
    const repoMoved = new TestRepository(served, 'moving.git');
    repoMoved.commit('one');
    repoMoved.tag('v2');
    const movingUrl = `${daemon.url}moving.git`;
    const pinned = await watching.resolve({ name: movingUrl, range: 'v2' });
    repoMoved.commit('two');
    repoMoved.tag('v2', true);
    const moved = await watching.resolve({ name: movingUrl, range: 'v2' });
    expect(moved.version).to.equal(pinned.version);
    expect(moved.digest).to.not.equal(pinned.digest);
    expect(moved.digest).to.equal(`git:${repoMoved.head()};tree:${repoMoved.treeOf('HEAD')}`);
    const warning = lines.find((line) => line.msg.startsWith('tag moved since it was last resolved'));
    expect(warning).to.include({ ref: 'refs/tags/v2', was: pinned.digest, now: moved.digest });
  });

  it('answers not_found for a ref the repository lacks, naming what it has', async () => {
    const err = await rejectionOf(registry.resolve({ name: url, range: 'v9.9.9' }));
    expect(err.code).to.equal('not_found');
    expect(err.details?.reason).to.equal('not_found');
    expect(err.message).to.include('v9.9.9').and.include(url);
    expect(err.hint).to.include('v1.0.0').and.include('main');
    const commit = await rejectionOf(registry.resolve({ name: url, range: 'f'.repeat(40) }));
    expect(commit.details?.reason).to.equal('not_found');
  });

  it('answers not_found for a repository the server does not have', async () => {
    const err = await rejectionOf(registry.resolve({ name: `${daemon.url}absent.git`, range: 'main' }));
    expect(err.details?.reason).to.equal('not_found');
    const local = await rejectionOf(registry.resolve({ name: `file://${work.path}/absent`, range: 'main' }));
    expect(local.details?.reason).to.equal('not_found');
  });

  it('refuses schemes other than https, git and file, credentials, and refs that are not names', async () => {
    for (const name of [
      'ssh://git@example.com/acme/tools.git',
      'git@example.com:acme/tools.git',
      'ext::sh -c touch% /tmp/pwned',
      'http://example.com/acme/tools.git',
      'https://user:token@example.com/acme/tools.git',
      '/srv/git/tools.git',
    ]) {
      const err = await rejectionOf(registry.resolve({ name, range: 'main' }));
      expect(err.code, name).to.equal('invalid_request');
      expect(err.message, name).to.not.include('token');
    }
    for (const range of [
      '--upload-pack=touch /tmp/x',
      'main..evil',
      'HEAD~1',
      'abc1234',
      'refs/heads/main',
    ]) {
      const err = await rejectionOf(registry.resolve({ name: url, range }));
      expect(err.code, range).to.equal('invalid_request');
    }
  });

  it('resolves only repositories the operator allows when allowedUrls is set', async () => {
    const limited = await openGitRegistry({
      cacheDir: `${work.path}/cache-limited`,
      allowedUrls: [`${daemon.url}moving.git`, 'https://example.com/acme/'],
      schemes: ['git', 'https'],
    });
    const err = await rejectionOf(limited.resolve({ name: url, range: 'v1.0.0' }));
    expect(err.code).to.equal('invalid_request');
    expect(err.hint).to.include('allowedUrls');
    const fileUrl = await rejectionOf(limited.resolve({ name: repo.fileUrl(), range: 'v1.0.0' }));
    expect(fileUrl.message).to.include('scheme "file:"');
    expect((await limited.resolve({ name: `${daemon.url}moving.git`, range: 'v2' })).version).to.equal('v2');
  });

  it('answers unavailable when the repository cannot be reached and nothing was seen before', async () => {
    const err = await rejectionOf(registry.resolve({ name: 'git://127.0.0.1:1/nothing.git', range: 'v1' }));
    expect(err.code).to.equal('unavailable');
    expect(err.details?.reason).to.equal('unavailable');
  });

  it('answers from the refs seen at the last contact while the repository is unreachable', async () => {
    const cacheDir = `${work.path}/cache-offline`;
    const other = new TestRepository(served, 'offline.git');
    other.commit('one');
    other.tag('v1');
    const secondDaemon = await startGitDaemon(served);
    const offlineUrl = `${secondDaemon.url}offline.git`;
    const online = await (await openGitRegistry({ cacheDir })).resolve({ name: offlineUrl, range: 'v1' });
    const branch = await (await openGitRegistry({ cacheDir })).resolve({ name: offlineUrl, range: 'main' });
    await secondDaemon.stop();
    const { logger, lines } = recordingLogger();
    const restarted = await openGitRegistry({ cacheDir, logger });
    expect(await restarted.resolve({ name: offlineUrl, range: 'v1' })).to.deep.equal(online);
    expect(await restarted.resolve({ name: offlineUrl, range: 'main' })).to.deep.equal(branch);
    expect(lines.map((line) => line.msg)).to.include(
      'repository unreachable; resolved from the refs seen at the last contact',
    );
    const unseen = await rejectionOf(restarted.resolve({ name: offlineUrl, range: 'v2' }));
    expect(unseen.details?.reason).to.equal('unavailable');
  });

  it('is a built-in plugin the host loads by name, providing the registry kind git', async () => {
    const db = await openDatabase({ url: ':memory:' });
    try {
      const host = new PluginHost({
        builtins: builtinPlugins,
        core: testCoreServices(db),
        logger: quietLogger(),
        baseDir: work.path,
      });
      await host.load([
        pluginEntrySchema.parse({
          resolve: 'registry-git',
          options: { cacheDir: `${work.path}/cache-host` },
        }),
      ]);
      expect(host.list()).to.deep.equal([
        {
          name: 'registry-git',
          kind: 'package-registry',
          specVersion: 'v2',
          source: 'builtin:registry-git',
          state: 'loaded',
        },
      ]);
      expect(host.extensions(extensionPoints.registryKinds).get('git')?.registryKind).to.equal('git');
      await host.start();
      await host.stop();
    } finally {
      await db.destroy();
    }
  });
});
