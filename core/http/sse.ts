import { PassThrough } from 'node:stream';
import type { Context } from 'koa';
import { disconnectSignal } from './disconnect.ts';

/** An event whose data is JSON text already (one line, as JSON.stringify writes it). */
export interface SseEvent {
  event: string;
  json: string;
  id?: string;
}

export interface SseStream {
  send(event: string, data: unknown, id?: string): void;
  /** Several events in one write: one chunk on the wire, not one per event. */
  sendJson(events: readonly SseEvent[]): void;
  close(): void;
  /** Aborts when the client goes away, so upstream work (an LLM call, a workflow) can stop. */
  readonly signal: AbortSignal;
}

/**
 * How often a stream says something (a comment) when it has nothing to send: what keeps a proxy's or
 * a load balancer's read timeout from cutting it (deploy/README.md).
 */
export const SSE_HEARTBEAT_MS = 15_000;

/** Opens a Server-Sent Events response with heartbeats; data is JSON, one event per `send`. */
export function openSse(ctx: Context, heartbeatMs = SSE_HEARTBEAT_MS): SseStream {
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
  const sendJson = (events: readonly SseEvent[]) => {
    if (closed || events.length === 0) return;
    let text = '';
    for (const { event, json, id } of events)
      text += `${id === undefined ? '' : `id: ${id}\n`}event: ${event}\ndata: ${json}\n\n`;
    stream.write(text);
  };
  return {
    signal,
    send: (event, data, id) =>
      sendJson([{ event, json: JSON.stringify(data), ...(id === undefined ? {} : { id }) }]),
    sendJson,
    close,
  };
}
