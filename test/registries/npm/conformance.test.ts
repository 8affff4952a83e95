import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import { describePackageRegistryBehaviourV2, type PackageRegistryFixtureV2 } from '@sigil/plugin-api/kit';
import { failingChecks, swallowingIntegrityFailures } from '../../support/failing-checks.ts';
import { packPackage, startVerdaccio, type Verdaccio } from '../../support/verdaccio.ts';
import { openRegistry, tempDir, writePackage } from './support.ts';

describe('registry-npm passes the package-registry kit against verdaccio', function () {
  this.timeout(30_000);
  const work = tempDir('registry-kit');
  let registry: Verdaccio;
  let fixture: PackageRegistryFixtureV2 | undefined;
  let caches = 0;

  before(async () => {
    const dir = (name: string) => join(work.path, 'fixtures', name);
    const marker = join(work.path, 'postinstall-ran');
    // Only packages without dependencies: no uplink needed, so this suite stays fast and offline.
    registry = await startVerdaccio({
      uplink: false,
      packages: ['1.0.0', '1.1.0', '2.0.0'].map((version) => ({
        dir: writePackage(dir(`plain-${version}`), { name: 'sigil-test-kit-plain', version }),
      })),
    });
    await registry.publish({
      dir: writePackage(dir('scripted'), {
        name: 'sigil-test-kit-scripted',
        version: '1.0.0',
        scripts: { postinstall: `node -e "require('fs').writeFileSync(${JSON.stringify(marker)}, 'ran')"` },
      }),
    });
    await registry.publish({
      dir: writePackage(dir('tampered'), { name: 'sigil-test-kit-tampered', version: '1.0.0' }),
    });
    const forged = await packPackage({
      dir: writePackage(
        dir('forged'),
        { name: 'sigil-test-kit-tampered', version: '1.0.0' },
        { 'index.js': 'module.exports = "forged";\n' },
      ),
    });
    copyFileSync(forged.tarball, registry.tarballPath('sigil-test-kit-tampered', '1.0.0'));
    await registry.publish({
      dir: writePackage(dir('moved'), { name: 'sigil-test-kit-moved', version: '1.0.0' }),
    });
    // Each move gives the version content it never had before, so every run of the check sees a move.
    let moves = 0;
    const movedContent = () => {
      moves += 1;
      return writePackage(
        dir(`moved-${moves}`),
        { name: 'sigil-test-kit-moved', version: '1.0.0' },
        { 'index.js': `module.exports = "changed ${moves}";\n` },
      );
    };
    const plain = registry.published.find((p) => p.version === '1.1.0');
    if (!plain) throw new Error('sigil-test-kit-plain@1.1.0 was not published');
    const entryPoint = { path: 'index.js', args: [] };
    fixture = {
      plain: { name: plain.name, range: '^1.0.0', version: '1.1.0', digest: plain.integrity, entryPoint },
      scripted: { name: 'sigil-test-kit-scripted', range: 'latest', marker, entryPoint },
      tampered: { name: 'sigil-test-kit-tampered', range: '1.0.0', entryPoint },
      moved: {
        name: 'sigil-test-kit-moved',
        range: '1.0.0',
        entryPoint,
        move: async () => {
          await registry.replaceVersion({ dir: movedContent() });
        },
      },
    };
  });

  after(async () => {
    await registry?.stop();
    work.cleanup();
  });

  // Every check gets an instance with an empty cache of its own.
  const load = () =>
    openRegistry({ registry: registry.url, cacheDir: join(work.path, 'caches', String((caches += 1))) });
  const readyFixture = () => {
    if (!fixture) throw new Error('the registry fixture is not ready');
    return fixture;
  };

  describePackageRegistryBehaviourV2(load, readyFixture);

  /** The ids of the checks that fail on a registry broken as `breakIt` says. */
  const failing = (breakIt: Parameters<typeof failingChecks>[2]) =>
    failingChecks(load, readyFixture, breakIt);

  it('the kit fails a registry that swallows integrity failures', async () => {
    const failed = await failing(swallowingIntegrityFailures('node'));
    expect(failed).to.deep.equal(['package-registry.integrity-mismatch-refused']);
  });

  it('the kit fails a registry that follows a changed version or keeps answering the old digest', async () => {
    const staleDigests = new Map<string, string>();
    const failed = await failing((real) => ({
      // Remembers the first digest of each version, as a cache that never revalidates would.
      resolve: async (spec) => {
        const resolved = await real.resolve(spec);
        const key = `${resolved.name}@${resolved.version}`;
        if (!staleDigests.has(key)) staleDigests.set(key, resolved.digest);
        return { ...resolved, digest: staleDigests.get(key) as string };
      },
    }));
    expect(failed).to.include('package-registry.moved-version-not-followed');
  });

  it('the kit fails a registry that hides install scripts or answers another version', async () => {
    const failed = await failing((real) => ({
      install: async (resolved, entryPoint) => ({
        ...(await real.install(resolved, entryPoint)),
        hasInstallScripts: false,
      }),
      resolve: async (spec) => ({ ...(await real.resolve(spec)), version: '0.0.0-other' }),
    }));
    expect(failed).to.include.members([
      'package-registry.resolve-exact',
      'package-registry.install-scripts-not-run',
    ]);
  });
});
