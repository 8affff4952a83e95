import type { JSONRPCNotification } from '@modelcontextprotocol/sdk/types.js';
import type { LaneAnswer, LaneExchange, LaneStream } from '../../../core/http/lane.ts';
import type { JsonRpcReply } from './jsonrpc.ts';

const EVENT_STREAM = 'text/event-stream';

/**
 * The answer to one POST: JSON, as always, unless the client accepts an event stream and something is
 * to be said before the result (a progress report, a log message, a changed tool list). Then the
 * stream opens at the first such notification, carries each as an SSE event, and ends with the
 * JSON-RPC response. Whatever the result holds (payment receipt, proof) is in the response itself, so
 * the two forms carry the same.
 */
export class McpAnswer {
  private stream: LaneStream | undefined;

  /** Absent when the client accepts only JSON: nothing can be said before the result. */
  readonly notify: ((notification: JSONRPCNotification) => void) | undefined;

  constructor(private readonly exchange: LaneExchange) {
    this.notify = acceptsEventStream(exchange.request.header('accept'))
      ? (notification) => this.send(notification)
      : undefined;
  }

  /** True once the stream has started: the HTTP status and headers are sent. */
  get streaming(): boolean {
    return this.stream !== undefined;
  }

  finish(status: number, reply: JsonRpcReply): LaneAnswer {
    return this.stream ? { status: 200, body: event(reply) } : { status, body: JSON.stringify(reply) };
  }

  /**
   * A notification is advisory: one that comes while the client reads slower than the server reports
   * is dropped rather than kept in memory.
   */
  private send(notification: JSONRPCNotification): void {
    this.stream ??= this.exchange.openStream({
      'Content-Type': EVENT_STREAM,
      'Cache-Control': 'no-cache, no-transform',
      // A proxy that buffers would hold the notifications back until the result.
      'X-Accel-Buffering': 'no',
    });
    if (!this.stream.congested) this.stream.write(event(notification));
  }
}

const event = (message: JsonRpcReply | JSONRPCNotification): string =>
  `event: message\ndata: ${JSON.stringify(message)}\n\n`;

/**
 * Whether an Accept header names text/event-stream itself with a quality above 0, as MCP clients do
 * (a wildcard, as curl sends, keeps the plain JSON answer).
 */
export function acceptsEventStream(accept: string): boolean {
  for (const range of accept.split(',')) {
    const [type, ...parameters] = range.split(';').map((part) => part.trim().toLowerCase());
    if (type !== EVENT_STREAM) continue;
    const quality = parameters.find((parameter) => parameter.startsWith('q='));
    if (quality === undefined || Number(quality.slice(2)) > 0) return true;
  }
  return false;
}
