import type { ServerResponse } from 'node:http';

/**
 * Tells work done for a request that its client went away before the answer was complete. For the
 * hot path, where an AbortSignal per request (its creation and listener) costs several microseconds.
 */
export interface Disconnection {
  whenGone(listener: () => void): void;
}

class ResponseDisconnection implements Disconnection {
  constructor(private readonly res: ServerResponse) {}

  whenGone(listener: () => void): void {
    const { res } = this;
    res.once('close', () => {
      if (!res.writableFinished) listener();
    });
  }
}

export const disconnection = (res: ServerResponse): Disconnection => new ResponseDisconnection(res);

/** The same as an AbortSignal, for work that takes one (an upstream fetch, a stream). */
export function disconnectSignal(res: ServerResponse): AbortSignal {
  const aborter = new AbortController();
  disconnection(res).whenGone(() => aborter.abort());
  return aborter.signal;
}
