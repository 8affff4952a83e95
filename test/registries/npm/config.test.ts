import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.ts';
import manifest from '../../../registries/npm/index.ts';
import { openTestKernel } from '../../support/kernel.ts';
import { tempDir } from './support.ts';

describe('registry-npm options, and the plugin under the kernel', () => {
  it('refuses options it does not have (the gateway runs the refresh now) and accepts the defaults', () => {
    expect(manifest.config.safeParse({ refresh: { at: '03:00' } }).success).to.equal(false);
    expect(manifest.config.safeParse({ registryUrl: 'x' }).success, 'unknown options').to.equal(false);
    expect(manifest.config.parse({})).to.deep.equal({
      registry: 'https://registry.npmjs.org/',
      cacheDir: 'data/packages',
    });
  });

  it('loads as the built-in `registry-npm` through the kernel, with the kernel clock', async () => {
    const cache = tempDir('registry-kernel');
    const clock = new ManualClock(new Date('2026-05-10T12:00:00Z'));
    const kernel = await openTestKernel({
      clock,
      config: { plugins: [{ resolve: 'registry-npm', enabled: true, options: { cacheDir: cache.path } }] },
    });
    try {
      const registry = kernel.plugins.one('package-registry');
      expect(registry.registryKind).to.equal('npm');
      expect(registry.specVersion).to.equal('v2');
      expect(await registry.cacheStatus()).to.deep.equal({ entries: [], bytes: 0 });
    } finally {
      await kernel.close();
      cache.cleanup();
    }
  });
});
