import type { ServerResponse } from 'node:http';

/** Aborts when the client goes away before the response is complete, so upstream work can stop. */
export function disconnectSignal(res: ServerResponse): AbortSignal {
  const aborter = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) aborter.abort();
  });
  return aborter.signal;
}
