import { expect } from 'chai';
import { TtlCache } from '@sigil/plugin-api/cache';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('TtlCache', () => {
  it('reads once for concurrent and repeated gets within the TTL, again after it', async () => {
    const cache = new TtlCache<string, number>({ ttlMs: 60, maxEntries: 10 });
    let reads = 0;
    const read = async () => ++reads;
    expect(
      await Promise.all([cache.get('k', read), cache.get('k', read), cache.get('k', read)]),
    ).to.deep.equal([1, 1, 1]);
    expect(await cache.get('k', read)).to.equal(1);
    await sleep(80);
    expect(await cache.get('k', read)).to.equal(2);
  });

  it('keeps no failed read', async () => {
    const cache = new TtlCache<string, number>({ ttlMs: 10_000, maxEntries: 10 });
    await cache.get('k', () => Promise.reject(new Error('down'))).catch(() => undefined);
    expect(await cache.get('k', async () => 7)).to.equal(7);
  });

  it('serves a value set by this process at once, and forgets deleted and cleared keys', async () => {
    const cache = new TtlCache<string, string>({ ttlMs: 10_000, maxEntries: 10 });
    const stale = async () => 'database';
    expect(await cache.get('a', stale)).to.equal('database');
    cache.set('a', 'written here');
    expect(await cache.get('a', stale)).to.equal('written here');
    cache.delete('a');
    expect(await cache.get('a', stale)).to.equal('database');
    cache.set('a', 'x');
    cache.clear();
    expect(await cache.get('a', stale)).to.equal('database');
  });

  it('holds at most maxEntries, dropping the least recently stored', async () => {
    const cache = new TtlCache<number, number>({ ttlMs: 10_000, maxEntries: 3 });
    let reads = 0;
    const read = (n: number) => async () => {
      reads++;
      return n;
    };
    for (const n of [1, 2, 3, 4]) await cache.get(n, read(n));
    expect(reads).to.equal(4);
    await cache.get(2, read(2));
    expect(reads).to.equal(4);
    await cache.get(1, read(1));
    expect(reads).to.equal(5);
  });

  it('with a TTL of 0, reads every time', async () => {
    const cache = new TtlCache<string, number>({ ttlMs: 0, maxEntries: 10 });
    let reads = 0;
    await cache.get('k', async () => ++reads);
    cache.set('k', 100);
    expect(await cache.get('k', async () => ++reads)).to.equal(2);
  });
});
