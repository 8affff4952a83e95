import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import {
  describePackageRegistryBehaviourV2,
  describePackageRegistryKitV2,
  type PackageRegistryFixtureV2,
} from '@sigil/plugin-api/kit';
import { failingChecks, followingMovedVersions } from '../../support/failing-checks.ts';
import { git, startGitDaemon, TestRepository, type GitDaemon } from '../../support/git.ts';
import { tempDir, writePackage } from '../npm/support.ts';
import { openGitRegistry, tamperStoredBlob } from './support.ts';

describe('registry-git passes the package-registry v2 kit against repositories served by git daemon', function () {
  this.timeout(60_000);
  const work = tempDir('registry-git-kit');
  const served = join(work.path, 'served');
  const marker = join(work.path, 'install-script-ran');
  // One cache for every instance: the tampered repository is tampered with inside it.
  const cacheDir = join(work.path, 'cache');
  let daemon: GitDaemon;
  let fixture: PackageRegistryFixtureV2 | undefined;

  /** A Node package without dependencies (npm needs no registry), committed and tagged v1. */
  const nodeRepository = (name: string, scripts: Record<string, string> = {}) => {
    const repo = new TestRepository(served, `${name}.git`);
    writePackage(repo.dir, {
      name: `sigil-test-${name}`,
      version: '1.0.0',
      bin: { [name]: 'index.js' },
      scripts,
    });
    repo.commit(name);
    repo.tag('v1');
    return repo;
  };
  // No dependency anywhere: an npm registry that cannot be reached proves none is asked.
  const load = () => openGitRegistry({ cacheDir, npmRegistry: 'http://127.0.0.1:1/' });

  before(async () => {
    mkdirSync(served, { recursive: true });
    daemon = await startGitDaemon(served);
    const url = (name: string) => `${daemon.url}${name}.git`;
    const plain = nodeRepository('plain');
    const moving = nodeRepository('moved');
    const tampered = nodeRepository('tampered');
    nodeRepository('scripted', { postinstall: `node -e "require('fs').writeFileSync('${marker}', 'ran')"` });
    // Resolved once, so the store holds its objects; then one of them is altered there.
    const seeding = await load();
    await seeding.resolve({ name: url('tampered'), range: 'v1' });
    tamperStoredBlob(
      seeding.cache.repository(url('tampered')),
      git(tampered.dir, 'rev-parse', 'v1:index.js'),
      'process.exit(0);\n',
    );
    const entryPoint = { args: [] };
    fixture = {
      plain: {
        name: url('plain'),
        range: 'v1',
        version: 'v1',
        digest: `git:${plain.commitOf('v1')};tree:${plain.treeOf('v1')}`,
        entryPoint,
      },
      tampered: { name: url('tampered'), range: 'v1', entryPoint },
      moved: {
        name: url('moved'),
        range: 'v1',
        entryPoint,
        move: async () => {
          writeFileSync(join(moving.dir, 'index.js'), 'module.exports = 2;\n');
          moving.commit('moved');
          moving.tag('v1', true);
        },
      },
      scripted: { name: url('scripted'), range: 'v1', entryPoint, marker },
    };
  });
  after(async () => {
    await daemon?.stop();
    work.cleanup();
  });

  const readyFixture = () => {
    if (!fixture) throw new Error('the repositories are not ready');
    return fixture;
  };

  describePackageRegistryKitV2(load);
  describePackageRegistryBehaviourV2(load, readyFixture);

  it('the kit fails a git registry that follows a moved tag instead of installing the pin', async () => {
    const failed = await failingChecks(load, readyFixture, followingMovedVersions, { timeoutMs: 20_000 });
    expect(failed).to.include('package-registry.moved-version-not-followed');
  });
});
