import { join } from 'node:path';
import { expect } from 'chai';
import { describePackageRegistryBehaviourV2, type PackageRegistryFixtureV2 } from '@sigil/plugin-api/kit';
import { failingChecks, followingMovedVersions } from '../../support/failing-checks.ts';
import { hostPlatform } from '../../../registries/oci/manifest.ts';
import {
  buildImage,
  type DockerRegistry,
  pushImage,
  startDockerRegistry,
  startTamperingProxy,
  type TamperingProxy,
} from '../../support/oci-registry.ts';
import { tempDir } from '../npm/support.ts';
import { openOciRegistry } from './support.ts';

describe('registry-oci passes the package-registry v2 kit against docker-registry', function () {
  this.timeout(30_000);
  const work = tempDir('registry-oci-kit');
  let registry: DockerRegistry;
  /** What the instances under test talk to: it alters every layer of kit/tampered. */
  let proxy: TamperingProxy;
  let fixture: PackageRegistryFixtureV2 | undefined;
  let caches = 0;

  before(async () => {
    registry = await startDockerRegistry();
    proxy = await startTamperingProxy(registry.url);
    const image = (server: string) =>
      buildImage({
        layers: [{ 'usr/bin/kit-server': `#!/bin/sh\necho ${server}\n` }],
        architecture: hostPlatform().architecture,
      });
    const plain = await image('plain');
    await pushImage(registry.url, 'kit/plain', 'v1', plain);
    const tampered = await image('tampered');
    await pushImage(registry.url, 'kit/tampered', 'v1', tampered);
    const tamperedLayers = new Set(tampered.layers.map((layer) => `/v2/kit/tampered/blobs/${layer.digest}`));
    proxy.rewrite = (path, body) =>
      tamperedLayers.has(path) ? { body: Buffer.concat([body, body]) } : undefined;
    await pushImage(registry.url, 'kit/moved', 'v1', await image('moved 0'));
    let moves = 0;
    const entryPoint = { bin: 'kit-server', args: [] };
    fixture = {
      plain: { name: 'kit/plain', range: 'v1', version: 'v1', digest: plain.manifest.digest, entryPoint },
      tampered: { name: 'kit/tampered', range: 'v1', entryPoint },
      moved: {
        name: 'kit/moved',
        range: 'v1',
        entryPoint,
        // Each run of the kit moves the tag once more, to an image it has never pointed at.
        move: async () => {
          await pushImage(registry.url, 'kit/moved', 'v1', await image(`moved ${(moves += 1)}`));
        },
      },
    };
  });

  after(async () => {
    await proxy?.stop();
    await registry?.stop();
    work.cleanup();
  });

  // Every check gets an instance with an empty cache of its own.
  const load = () =>
    openOciRegistry({ registry: proxy.url, cacheDir: join(work.path, 'caches', String((caches += 1))) });
  const readyFixture = () => {
    if (!fixture) throw new Error('the registry fixture is not ready');
    return fixture;
  };
  // Images have no install scripts.
  const traits = { installScripts: false };

  describePackageRegistryBehaviourV2(load, readyFixture, traits);

  /** The ids of the checks that fail on a registry broken as `breakIt` says. */
  const failing = (breakIt: Parameters<typeof failingChecks>[2]) =>
    failingChecks(load, readyFixture, breakIt, { traits });

  it('the kit fails a registry that installs whatever its tag names now, not the pin', async () => {
    const failed = await failing(followingMovedVersions);
    expect(failed).to.deep.equal(['package-registry.moved-version-not-followed']);
  });

  it('the kit fails a registry that answers for an entry point the image does not have', async () => {
    const failed = await failing((real) => ({
      install: (resolved, entryPoint) => real.install(resolved, { args: entryPoint.args }),
    }));
    expect(failed).to.deep.equal(['package-registry.unknown-entry-point']);
  });
});
