/**
 * `work` on each item, at most `limit` at once; the results in the order of the items. The first
 * failure aborts the signal the others run with and is the rejection; when `signal` aborts, its
 * reason is.
 */
export async function mapBounded<T, R>(
  items: readonly T[],
  limit: number,
  signal: AbortSignal,
  work: (item: T, index: number, signal: AbortSignal) => Promise<R>,
): Promise<R[]> {
  const failed = new AbortController();
  const shared = AbortSignal.any([signal, failed.signal]);
  const results: R[] = [];
  let next = 0;
  const worker = async () => {
    while (next < items.length && !shared.aborted) {
      const index = next++;
      try {
        results[index] = await work(items[index] as T, index, shared);
      } catch (err) {
        if (!failed.signal.aborted) failed.abort(err);
        return;
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  signal.throwIfAborted();
  if (failed.signal.aborted) throw failed.signal.reason;
  return results;
}
