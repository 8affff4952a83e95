import { PassThrough } from 'node:stream';
import type { Context } from 'koa';
import { disconnectSignal } from './disconnect.ts';

export interface SseStream {
  send(event: string, data: unknown, id?: string): void;
  close(): void;
  /** Aborts when the client goes away, so upstream work (an LLM call, a workflow) can stop. */
  readonly signal: AbortSignal;
}

/** Opens a Server-Sent Events response with heartbeats; data is JSON, one event per `send`. */
export function openSse(ctx: Context, heartbeatMs = 15_000): SseStream {
  const stream = new PassThrough();
  const signal = disconnectSignal(ctx.res);
  ctx.req.socket.setTimeout(0);
  ctx.req.socket.setNoDelay(true);
  ctx.status = 200;
  ctx.set({
    'Content-Type': 'text/event-stream; charset=utf-8',
    'Cache-Control': 'no-cache, no-transform',
    Connection: 'keep-alive',
    'X-Accel-Buffering': 'no',
  });
  ctx.body = stream;
  const heartbeat = setInterval(() => stream.write(': ping\n\n'), heartbeatMs);
  heartbeat.unref();
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    clearInterval(heartbeat);
    stream.end();
  };
  ctx.res.on('close', close);
  return {
    signal,
    send(event, data, id) {
      if (closed) return;
      const lines = [
        id === undefined ? '' : `id: ${id}\n`,
        `event: ${event}\n`,
        `data: ${JSON.stringify(data)}\n\n`,
      ];
      stream.write(lines.join(''));
    },
    close,
  };
}
