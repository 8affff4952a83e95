import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync, utimesSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.ts';
import { CacheLayout, digestHex, sha512Of } from '../../../registries/npm/cache.ts';
import { openRegistry, tempDir } from './support.ts';

const DIGEST = `sha512-${Buffer.alloc(64, 7).toString('base64')}`;

describe('registry-npm cache layout', () => {
  it('keys entries by name, version and the first 128 bits of the sha512 digest', () => {
    const key = CacheLayout.key({ name: '@scope/pkg', version: '1.2.3-rc.1', digest: DIGEST });
    expect(key).to.equal(`@scope+pkg@1.2.3-rc.1-${'07'.repeat(16)}`);
    expect(digestHex(DIGEST)).to.equal('07'.repeat(64));
    expect(sha512Of(`sha1-abc= ${DIGEST}?opt`)).to.equal(DIGEST);
    expect(sha512Of('sha1-abc=')).to.equal(undefined);
  });

  it("clears crashed installs at start-up, and leaves a live process's install alone", async () => {
    const cache = tempDir('registry-staging');
    const staging = join(cache.path, 'staging');
    // A process that is alive during the test, standing for another gateway sharing the cache.
    const other = spawn('sleep', ['30']);
    const dead = spawn('true');
    await new Promise((resolve) => dead.once('exit', resolve));
    const stage = (name: string, ageMs = 0) => {
      const dir = join(staging, name);
      mkdirSync(join(dir, 'node_modules'), { recursive: true });
      writeFileSync(join(dir, 'package.json'), '{}');
      const when = new Date(Date.now() - ageMs);
      utimesSync(dir, when, when);
    };
    try {
      stage(`a@1.0.0-00#${hostname()}#${other.pid}#1`);
      stage(`b@1.0.0-00#${hostname()}#${dead.pid}#2`);
      stage(`c@1.0.0-00#${hostname()}#${process.pid}#3`); // an earlier run with this pid (containers)
      stage('d@1.0.0-00#elsewhere#42#4', 60_000);
      stage('e@1.0.0-00#elsewhere#42#5', 2 * 24 * 60 * 60 * 1000);
      const registry = await openRegistry({ registry: 'http://127.0.0.1:9/', cacheDir: cache.path });
      expect(readdirSync(staging).sort()).to.deep.equal([
        `a@1.0.0-00#${hostname()}#${other.pid}#1`,
        'd@1.0.0-00#elsewhere#42#4',
      ]);
      expect((await registry.cacheStatus()).entries).to.deep.equal([]);
    } finally {
      other.kill();
      cache.cleanup();
    }
  });

  it("another host's staged install is a leftover once a day old by the injected clock, not before", async () => {
    const cache = tempDir('registry-staging-age');
    const name = 'f@1.0.0-00#elsewhere#42#6';
    try {
      const dir = join(cache.path, 'staging', name);
      mkdirSync(dir, { recursive: true });
      const written = new Date('2026-03-18T12:00:00Z');
      utimesSync(dir, written, written);
      const clock = new ManualClock(written.getTime() + 24 * 60 * 60 * 1000);
      const layout = new CacheLayout(cache.path, clock);
      expect(await layout.prepare()).to.deep.equal([]);
      clock.advance(1);
      expect(await layout.prepare()).to.deep.equal([name]);
      expect(readdirSync(join(cache.path, 'staging'))).to.deep.equal([]);
    } finally {
      cache.cleanup();
    }
  });
});
