import type { Context } from 'koa';

/** Aborts when the client goes away before the response is complete, so upstream work can stop. */
export function disconnectSignal(ctx: Context): AbortSignal {
  const aborter = new AbortController();
  ctx.res.once('close', () => {
    if (!ctx.res.writableFinished) aborter.abort();
  });
  return aborter.signal;
}
