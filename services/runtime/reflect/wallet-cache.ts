import type { Clock } from '../../../core/clock.ts';

/** Wallets a cache keeps (the oldest goes first beyond this many). */
const CACHED_WALLETS = 1000;

interface Entry<T> {
  value: Promise<T>;
  loadedAt: number;
}

/**
 * A value per wallet read at most once every `ttlMs` (issue 30: a chat turn read its wallet's
 * self-improvement settings, learnings and skills each time, and its settings again after it). What
 * this process writes it invalidates once the write commits, so a change made here is seen by the
 * next read here; another replica's is seen within `ttlMs`. The read in flight is what is kept, so
 * concurrent turns of a wallet share one; an invalidation drops it, and a failed read is not kept.
 * `ttlMs` 0 keeps nothing.
 */
export class WalletCache<T> {
  private readonly entries = new Map<string, Entry<T>>();

  constructor(
    private readonly clock: Clock,
    private readonly ttlMs: number,
  ) {}

  get(wallet: string, load: () => Promise<T>): Promise<T> {
    if (this.ttlMs <= 0) return load();
    const now = this.clock.now().getTime();
    const cached = this.entries.get(wallet);
    if (cached && now - cached.loadedAt < this.ttlMs) return cached.value;
    const entry: Entry<T> = { value: load(), loadedAt: now };
    this.entries.delete(wallet);
    this.entries.set(wallet, entry);
    if (this.entries.size > CACHED_WALLETS) this.entries.delete(this.entries.keys().next().value as string);
    entry.value.catch(() => {
      if (this.entries.get(wallet) === entry) this.entries.delete(wallet);
    });
    return entry.value;
  }

  /** The wallet's value changed (after its write committed): the next read reads it again. */
  invalidate(wallet: string): void {
    this.entries.delete(wallet);
  }
}
