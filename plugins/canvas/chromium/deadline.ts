import { SigilError } from '@sigil/plugin-api';

/**
 * A signal that aborts with the run's own signal (with its reason) or when `timeoutMs` passes (with
 * a SigilError `unavailable`, reason `timeout`), whichever comes first.
 */
export function deadline(signal: AbortSignal, timeoutMs: number): { signal: AbortSignal; dispose(): void } {
  const controller = new AbortController();
  const follow = () => controller.abort(signal.reason);
  if (signal.aborted) follow();
  else signal.addEventListener('abort', follow, { once: true });
  const timer = setTimeout(
    () =>
      controller.abort(
        new SigilError('unavailable', `the browser check did not finish within ${timeoutMs} ms`, {
          details: { reason: 'timeout', timeoutMs },
        }),
      ),
    timeoutMs,
  );
  return {
    signal: controller.signal,
    dispose: () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', follow);
    },
  };
}
