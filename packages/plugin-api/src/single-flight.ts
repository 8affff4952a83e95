/**
 * One run of a piece of work per key at a time in this process: a caller that asks while a run for
 * its key is in progress gets that run's result (or failure) instead of starting another. A key is
 * free again once its run has ended, so a failed run is not kept.
 */
export class SingleFlight {
  private readonly running = new Map<string, Promise<unknown>>();

  run<T>(key: string, work: () => Promise<T>): Promise<T> {
    let pending = this.running.get(key) as Promise<T> | undefined;
    if (!pending) {
      pending = work().finally(() => this.running.delete(key));
      this.running.set(key, pending);
    }
    return pending;
  }

  /** Resolves once every run in progress has ended, however it ended (for a plugin's `stop`). */
  async settled(): Promise<void> {
    await Promise.allSettled(this.running.values());
  }
}
