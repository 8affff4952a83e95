import type { SigilError } from '../errors.ts';

/**
 * Runs `task` with a signal that aborts when `signal` does or after `timeoutMs`: an abort rejects with
 * the signal's reason (as canvas nodes must), a timeout with `timedOut()`, anything else as it came.
 */
export async function withDeadline<T>(
  signal: AbortSignal,
  timeoutMs: number,
  task: (signal: AbortSignal) => Promise<T>,
  timedOut: () => SigilError,
): Promise<T> {
  const timeout = AbortSignal.timeout(timeoutMs);
  try {
    return await task(AbortSignal.any([signal, timeout]));
  } catch (err) {
    if (signal.aborted) throw signal.reason;
    if (timeout.aborted) throw timedOut();
    throw err;
  }
}
