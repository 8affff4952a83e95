interface Queued<Write, Result> {
  write: Write;
  resolve(result: Result): void;
  reject(err: unknown): void;
}

interface Lane<Write, Result> {
  queued: Queued<Write, Result>[];
  /** Writes added and not yet settled (queued or in the transaction committing). */
  backlog: number;
  busy: boolean;
}

/**
 * Group commit: writes on one lane go one transaction at a time, and every write added while a
 * transaction commits goes into the next one. Writes added in one synchronous turn always share a
 * transaction (a batch starts on a later turn of the event loop), so a caller can make several
 * writes atomic by adding them together. `commit` gets a batch in the order its writes were added
 * and answers each write's result, or throws: then every write of the batch is rejected with it.
 */
export class GroupCommit<Write, Result> {
  private readonly lanes = new Map<string, Lane<Write, Result>>();
  private readonly drained = new Set<() => void>();

  constructor(private readonly commit: (writes: Write[]) => Promise<Result[]>) {}

  add(lane: string, write: Write): Promise<Result> {
    const queue = this.lanes.get(lane) ?? { queued: [], backlog: 0, busy: false };
    this.lanes.set(lane, queue);
    const result = new Promise<Result>((resolve, reject) => queue.queued.push({ write, resolve, reject }));
    queue.backlog++;
    if (!queue.busy) this.schedule(lane, queue);
    return result;
  }

  /** Writes of the lane not yet committed. */
  backlog(lane: string): number {
    return this.lanes.get(lane)?.backlog ?? 0;
  }

  /** Resolves once every write added so far has settled. */
  async idle(): Promise<void> {
    if (this.lanes.size === 0) return;
    await new Promise<void>((resolve) => this.drained.add(resolve));
  }

  private schedule(lane: string, queue: Lane<Write, Result>): void {
    queue.busy = true;
    setImmediate(() => void this.flush(lane, queue));
  }

  private async flush(lane: string, queue: Lane<Write, Result>): Promise<void> {
    const batch = queue.queued.splice(0);
    try {
      const results = await this.commit(batch.map((queued) => queued.write));
      batch.forEach((queued, i) => queued.resolve(results[i] as Result));
    } catch (err) {
      for (const queued of batch) queued.reject(err);
    }
    queue.backlog -= batch.length;
    if (queue.queued.length > 0) return this.schedule(lane, queue);
    queue.busy = false;
    this.lanes.delete(lane);
    if (this.lanes.size > 0) return;
    for (const resolve of this.drained) resolve();
    this.drained.clear();
  }
}
