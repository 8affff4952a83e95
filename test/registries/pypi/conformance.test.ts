import { join } from 'node:path';
import { expect } from 'chai';
import { describePackageRegistryBehaviourV2, type PackageRegistryFixtureV2 } from '@sigil/plugin-api/kit';
import type { PackageRegistryV2 } from '@sigil/plugin-api';
import {
  failingChecks,
  followingMovedVersions,
  swallowingIntegrityFailures,
} from '../../support/failing-checks.ts';
import { type PythonIndex, served, startPythonIndex } from '../../support/python-index.ts';
import { buildWheel, wheelFromProject } from '../../support/python-wheels.ts';
import { tempDir } from '../npm/support.ts';
import { FIXTURES, openRegistry } from './support.ts';

/** Wheels have no install hooks: the kit's install-script check does not apply. */
const TRAITS = { installScripts: false };

describe('registry-pypi passes the package-registry v2 kit against a local index', function () {
  this.timeout(60_000);
  const work = tempDir('registry-pypi-kit');
  let index: PythonIndex;
  let fixture: PackageRegistryFixtureV2 | undefined;
  let caches = 0;

  before(async () => {
    const server = await wheelFromProject(join(FIXTURES, 'sigil-echo-server'));
    const moved = (content: string) =>
      buildWheel({ name: 'sigil-kit-moved', version: '1.0.0', files: { 'sigil_kit_moved.py': content } });
    const tampered = await buildWheel({
      name: 'sigil-kit-tampered',
      version: '1.0.0',
      files: { 't.py': '' },
    });
    index = await startPythonIndex({
      projects: {
        'sigil-echo-server': [served(server)],
        'sigil-echo-format': [served(await wheelFromProject(join(FIXTURES, 'sigil-echo-format')))],
        'sigil-kit-tampered': [
          { ...served(tampered), bytes: Buffer.concat([tampered.bytes, Buffer.from('x')]) },
        ],
        'sigil-kit-moved': [served(await moved('before = 1\n'))],
      },
    });
    let moves = 0;
    fixture = {
      plain: {
        name: 'sigil-echo-server',
        range: '>=1,<2',
        version: '1.0.0',
        digest: `sha256:${server.sha256}`,
        entryPoint: { bin: 'sigil-echo-server', args: [] },
      },
      tampered: { name: 'sigil-kit-tampered', range: 'latest', entryPoint: { module: 't', args: [] } },
      moved: {
        name: 'sigil-kit-moved',
        range: '1.0.0',
        entryPoint: { module: 'sigil_kit_moved', args: [] },
        // Each call republishes other bytes: the kit may move it more than once (a broken registry's run first).
        move: async () => index.replace(served(await moved(`after = ${(moves += 1)}\n`))),
      },
    };
  });

  after(async () => {
    await index?.stop();
    work.cleanup();
  });

  // Every check gets an instance with an empty cache of its own.
  const load = (): Promise<PackageRegistryV2> =>
    openRegistry({ index: index.url, cacheDir: join(work.path, String((caches += 1))) });
  const readyFixture = () => {
    if (!fixture) throw new Error('the index fixture is not ready');
    return fixture;
  };

  describePackageRegistryBehaviourV2(load, readyFixture, TRAITS);

  /** The ids of the checks that fail on a registry broken as `breakIt` says. */
  const failing = (breakIt: Parameters<typeof failingChecks>[2]) =>
    failingChecks(load, readyFixture, breakIt, { traits: TRAITS, timeoutMs: 20_000 });

  it('the kit fails a registry that swallows integrity failures', async () => {
    const failed = await failing(swallowingIntegrityFailures('python'));
    expect(failed).to.deep.equal(['package-registry.integrity-mismatch-refused']);
  });

  it('the kit fails a registry that installs whatever the index now serves for a pinned version', async () => {
    const failed = await failing(followingMovedVersions);
    expect(failed).to.include('package-registry.moved-version-not-followed');
  });
});
