/**
 * `@sigil/plugin-api/cache`: caches a plugin may keep.
 *
 * - `TtlCache`: a process's short-lived copy of values whose truth lives elsewhere.
 * - `InstallCache`: a package registry's cache of installs on disk, each appearing whole by one
 *   rename, shared by the processes that name its directory; with `cacheContents` (what
 *   `cacheStatus` answers), `directorySize` and `samePackage` for registries built on it.
 * - `SingleFlight`: one run of a piece of work per key at a time.
 */
export type * from './install-cache.ts';
export {
  cacheContents,
  cacheEntryOf,
  directorySize,
  InstallCache,
  installedEntry,
  samePackage,
} from './install-cache.ts';
export { SingleFlight } from './single-flight.ts';

/**
 * A process's short-lived copy of values whose truth lives elsewhere (the
 * shared database, a chain, an upstream API), so that a hot path (every tool call) does not read it
 * each time. Each entry is trusted for `ttlMs`; the process that changes a value replaces or drops its
 * copy at once, so the TTL only bounds how late another replica sees the change. Concurrent misses for
 * one key share one read; a failed read is not kept. Past `maxEntries`, the least recently stored entry
 * goes.
 */
export class TtlCache<K, V> {
  private readonly entries = new Map<K, { expires: number; value: Promise<V> }>();

  constructor(private readonly options: { ttlMs: number; maxEntries: number }) {}

  get(key: K, read: () => Promise<V>): Promise<V> {
    const now = performance.now();
    const hit = this.entries.get(key);
    if (hit && hit.expires > now) return hit.value;
    if (this.options.ttlMs <= 0) return read();
    const entry = { expires: now + this.options.ttlMs, value: read() };
    this.store(key, entry);
    entry.value.catch(() => {
      if (this.entries.get(key) === entry) this.entries.delete(key);
    });
    return entry.value;
  }

  /** Replaces the copy with a value this process has just written. */
  set(key: K, value: V): void {
    if (this.options.ttlMs <= 0) return;
    this.store(key, { expires: performance.now() + this.options.ttlMs, value: Promise.resolve(value) });
  }

  delete(key: K): void {
    this.entries.delete(key);
  }

  clear(): void {
    this.entries.clear();
  }

  private store(key: K, entry: { expires: number; value: Promise<V> }): void {
    // Re-inserting moves the key to the end, so the first key is always the least recently stored.
    this.entries.delete(key);
    this.entries.set(key, entry);
    if (this.entries.size > this.options.maxEntries) {
      const oldest = this.entries.keys().next().value as K;
      this.entries.delete(oldest);
    }
  }
}
