import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { pino } from 'pino';
import type { CacheEntry } from '@sigil/plugin-api';
import { cacheContents, InstallCache, samePackage, SingleFlight } from '@sigil/plugin-api/cache';
import { ManualClock } from '../../../core/clock.ts';
import { recordingLogger } from '../../support/logs.ts';

interface TestRecord extends CacheEntry {
  layout: 1;
}

const silent = pino({ level: 'silent' });
const logged = { label: 'pkg@1.0.0', logger: silent, noun: 'package' };
const pinned = { name: 'pkg', version: '1.0.0', digest: 'sha256:aa' };
const key = (wanted: { name: string; version: string }) => `${wanted.name}@${wanted.version}`;
const fields = (installedAt: string) => ({ ...pinned, installedAt, sizeBytes: 3, hasInstallScripts: false });

describe('plugin API: InstallCache, the install cache of package registries', () => {
  let root: string;
  let cache: InstallCache<TestRecord>;
  beforeEach(async () => {
    root = await mkdtemp(join(tmpdir(), 'sigil-install-cache-'));
    cache = new InstallCache<TestRecord>({
      root,
      recordFile: 'record.json',
      layout: 1,
      key,
      matches: samePackage,
      clock: new ManualClock(),
    });
    await cache.ready(silent);
  });
  afterEach(() => rm(root, { recursive: true, force: true }));

  it('builds an entry once for concurrent installs, then answers it from disk without building', async () => {
    const { logger, lines } = recordingLogger();
    const logged = { label: 'pkg@1.0.0', logger, noun: 'package', details: () => ({ files: 1 }) };
    let builds = 0;
    const build = async (staged: string) => {
      builds += 1;
      writeFileSync(join(staged, 'payload'), 'abc');
      return fields('2026-01-01T00:00:00.000Z');
    };
    const installs = await Promise.all([1, 2, 3].map(() => cache.install(pinned, { build, ...logged })));
    expect(builds).to.equal(1);
    expect(installs.map((entry) => entry.installedAt)).to.deep.equal(
      Array(3).fill('2026-01-01T00:00:00.000Z'),
    );
    expect(await cache.install(pinned, { build, ...logged })).to.deep.equal(installs[0]);
    expect(builds).to.equal(1);
    expect(
      lines.map(({ msg, package: label, bytes, files }) => ({ msg, label, bytes, files })),
    ).to.deep.equal([
      { msg: 'installing package', label: 'pkg@1.0.0', bytes: undefined, files: undefined },
      { msg: 'installed package', label: 'pkg@1.0.0', bytes: 3, files: 1 },
    ]);
    expect(readFileSync(join(cache.entryDir(pinned), 'payload'), 'utf8')).to.equal('abc');
    expect(readdirSync(cache.staging)).to.deep.equal([]);
    expect(cacheContents(await cache.list())).to.deep.equal({
      entries: [fields('2026-01-01T00:00:00.000Z')],
      bytes: 3,
    });
  });

  it('keeps nothing of a failed build, and builds again on the next call', async () => {
    const failing = cache.install(pinned, {
      build: async (staged) => {
        writeFileSync(join(staged, 'half'), '');
        throw new Error('download broke');
      },
      ...logged,
    });
    await failing.then(
      () => expect.fail('the install succeeded'),
      (err: Error) => expect(err.message).to.equal('download broke'),
    );
    expect(readdirSync(cache.entries)).to.deep.equal([]);
    expect(readdirSync(cache.staging)).to.deep.equal([]);
    const entry = await cache.install(pinned, {
      build: async () => fields('2026-01-02T00:00:00.000Z'),
      ...logged,
    });
    expect(entry.installedAt).to.equal('2026-01-02T00:00:00.000Z');
  });

  it('keeps the entry another process committed first, and replaces a directory that is no entry', async () => {
    const theirs = await cache.commit(await cache.stage(pinned), fields('2026-01-01T00:00:00.000Z'));
    const mine = await cache.stage(pinned);
    expect(await cache.commit(mine, fields('2026-01-02T00:00:00.000Z'))).to.deep.equal(theirs);
    expect(existsSync(mine)).to.equal(false);

    const other = { ...pinned, version: '2.0.0' };
    mkdirSync(join(cache.entryDir(other), 'left-by-hand'), { recursive: true });
    expect(await cache.read(other)).to.equal(undefined);
    const replaced = await cache.commit(await cache.stage(other), {
      ...fields('2026-01-03T00:00:00.000Z'),
      version: '2.0.0',
    });
    expect(await cache.read(other)).to.deep.equal(replaced);
    expect(existsSync(join(cache.entryDir(other), 'left-by-hand'))).to.equal(false);
    expect(readdirSync(cache.staging)).to.deep.equal([]);
  });

  it('lists only entries of its layout whose record belongs under their name', async () => {
    await cache.commit(await cache.stage(pinned), fields('2026-01-01T00:00:00.000Z'));
    const misplaced = join(cache.entries, 'elsewhere@9');
    mkdirSync(misplaced);
    writeFileSync(join(misplaced, 'record.json'), JSON.stringify({ layout: 1, ...fields('x') }));
    const older = join(cache.entries, 'pkg@0.1.0');
    mkdirSync(older);
    writeFileSync(
      join(older, 'record.json'),
      JSON.stringify({ layout: 0, ...fields('x'), version: '0.1.0' }),
    );
    expect((await cache.list()).map((entry) => entry.version)).to.deep.equal(['1.0.0']);
  });

  it("removes what a dead process or an earlier run with this pid staged, and keeps this process's own", async () => {
    const own = await cache.stage(pinned);
    const earlierRun = join(cache.staging, `pkg@1.0.0#${hostname()}#${process.pid}#1#00`);
    const dead = join(cache.staging, `pkg@1.0.0#${hostname()}#999999999#1#00`);
    mkdirSync(earlierRun);
    mkdirSync(dead);
    expect((await cache.prepare()).sort()).to.deep.equal(
      [earlierRun, dead].map((dir) => dir.slice(cache.staging.length + 1)).sort(),
    );
    expect(readdirSync(cache.staging)).to.deep.equal([own.slice(cache.staging.length + 1)]);
  });
});

describe('plugin API: SingleFlight', () => {
  it('shares a run in progress by key, forgets it once ended, and says when all have ended', async () => {
    const flight = new SingleFlight();
    let release!: () => void;
    let runs = 0;
    const work = () =>
      new Promise<number>((resolve) => {
        runs += 1;
        release = () => resolve(runs);
      });
    const first = flight.run('k', work);
    const second = flight.run('k', work);
    const other = flight.run('other', async () => 'other');
    let settled = false;
    const allEnded = flight.settled().then(() => (settled = true));
    expect(await other).to.equal('other');
    expect(settled).to.equal(false);
    release();
    expect(await Promise.all([first, second])).to.deep.equal([1, 1]);
    await allEnded;
    const third = flight.run('k', work);
    release();
    expect(await third).to.equal(2);
  });
});
