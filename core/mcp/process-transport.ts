import { serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type {
  JSONRPCMessage,
  JSONRPCNotification,
  JSONRPCResponse,
} from '@modelcontextprotocol/sdk/types.js';

/** The stdio of a process someone else started (a sandbox, a container): what the transport needs. */
export interface ProcessStdio {
  readonly stdin: NodeJS.WritableStream;
  readonly stdout: NodeJS.ReadableStream;
  readonly stderr?: NodeJS.ReadableStream;
  /** Settles when the process has ended. */
  readonly exited?: Promise<unknown>;
  /** Ends the process; called by `close()`. */
  kill?(): Promise<void>;
}

export interface ProcessStdioTransportOptions {
  /** Longest message (one line of stdout) accepted; a longer one is an error and closes the transport. */
  maxMessageBytes?: number;
  /**
   * Receives stderr chunks. Stderr is always drained (a full pipe would stall the server); without
   * this callback its bytes are dropped.
   */
  onStderr?: (chunk: Buffer) => void;
}

/**
 * An MCP SDK transport over the stdio of an already started process: newline-delimited JSON-RPC, as
 * the SDK's own stdio transports speak, but without owning the process's creation, so a sandbox
 * runtime can start it. `close()` kills the process; the process ending closes the transport.
 */
export class ProcessStdioTransport implements Transport {
  onclose?: () => void;
  onerror?: (error: Error) => void;
  onmessage?: (message: JSONRPCMessage) => void;

  private readonly lines: MessageLines;
  private closed = false;
  private started = false;
  private corked = false;
  private readonly drainWaiters: (() => void)[] = [];
  /** Requests sent with `request()`, by id: their answers go to these, never to the SDK. */
  private readonly ownRequests = new Map<string, (answer: OwnAnswer) => void>();
  /** The own requests that listen to the server's notifications about them, by id. */
  private readonly ownListeners = new Map<string, (notification: JSONRPCNotification) => void>();
  private nextOwnId = 0;
  private spokeOnce = false;
  private closing = false;

  constructor(
    private readonly process: ProcessStdio,
    private readonly options: ProcessStdioTransportOptions = {},
  ) {
    this.lines = new MessageLines(options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES);
  }

  async start(): Promise<void> {
    if (this.started) throw new Error('ProcessStdioTransport already started');
    this.started = true;
    const { stdout, stderr, exited } = this.process;
    stdout.on('data', this.onData);
    stdout.on('error', this.onStreamError);
    stdout.once('end', this.onEnd);
    if (stderr) {
      const onStderr = this.options.onStderr;
      stderr.on('data', (chunk: Buffer) => onStderr?.(chunk));
      stderr.on('error', () => undefined); // stderr is diagnostics only: its failure is not the session's
    }
    void exited?.then(this.onEnd, this.onEnd);
  }

  send(message: JSONRPCMessage): Promise<void> {
    if (this.closed) return Promise.reject(new Error('transport closed: the process has ended'));
    const { stdin } = this.process;
    // A process that ended (or is being ended) before its `exited` settled: a write would fail with
    // the stream's "write after end", which says nothing of why.
    if (!stdin.writable)
      return Promise.reject(new Error('transport closed: the process has closed its stdin'));
    return new Promise((resolve, reject) => {
      this.corkUntilEndOfTurn(stdin);
      // Resolving on `drain` rather than on the write callback keeps the SDK's flow control: a slow
      // server holds the caller back instead of growing an unbounded buffer here.
      const flushed = stdin.write(serializeMessage(message), (error) => {
        if (error) reject(error);
      });
      if (flushed) resolve();
      else this.afterDrain(stdin, resolve);
    });
  }

  /** One `drain` listener for all the senders waiting on a full pipe, however many calls are in flight. */
  private afterDrain(stdin: NodeJS.WritableStream, resolve: () => void): void {
    this.drainWaiters.push(resolve);
    if (this.drainWaiters.length > 1) return;
    stdin.once('drain', () => {
      const waiters = this.drainWaiters.splice(0);
      for (const waiter of waiters) waiter();
    });
  }

  /**
   * Messages sent in one turn of the event loop (the calls of all the requests a busy gateway read in
   * that turn) leave in one write, made when the turn's I/O callbacks are done. A pipe write wakes the
   * server's process: in a CPU profile of the gateway at 50 calls in flight, one write per message took
   * 45 µs per call, one per turn 15 µs. Flushing at the next tick batches only what one callback sent.
   */
  private corkUntilEndOfTurn(stdin: NodeJS.WritableStream): void {
    const corkable = stdin as NodeJS.WritableStream & { cork?: () => void; uncork?: () => void };
    if (this.corked || !corkable.cork || !corkable.uncork) return;
    corkable.cork();
    this.corked = true;
    setImmediate(() => {
      this.corked = false;
      corkable.uncork?.();
    });
  }

  /**
   * Sends a request outside the SDK's `Protocol`, on the same stdio: its answer (or the transport's
   * end) goes to `onAnswer` and never reaches the SDK. Ids are strings, which the SDK's own requests
   * (numbers) never use. `forget(id)` drops the request (timed out, cancelled), so a late answer is
   * ignored. With `onNotification`, the request asks for progress (its progress token is its id) and
   * hears the server's notifications/progress with that token, and its notifications/message while it
   * is the only own request in flight: over stdio a log message names no request, so only then can it
   * be told whose it is. Those notifications do not reach the SDK.
   */
  request(
    method: string,
    params: Record<string, unknown>,
    onAnswer: (answer: OwnAnswer) => void,
    onNotification?: (notification: JSONRPCNotification) => void,
  ): { id: string; sent: Promise<void> } {
    const id = `sigil-${this.nextOwnId++}`;
    if (!this.closed) {
      this.ownRequests.set(id, onAnswer);
      if (onNotification) this.ownListeners.set(id, onNotification);
    }
    const sent = onNotification
      ? { ...params, _meta: { ...(params._meta as object | undefined), progressToken: id } }
      : params;
    return { id, sent: this.send({ jsonrpc: '2.0', id, method, params: sent }) };
  }

  /** Whether the process has sent a message yet: one that has not answered anything is silent or gone. */
  get spoke(): boolean {
    return this.spokeOnce;
  }

  forget(id: string): void {
    this.ownRequests.delete(id);
    this.ownListeners.delete(id);
  }

  /** Whether `close()` was called: the process's end after it is not the process's own doing. */
  get closedByCaller(): boolean {
    return this.closing;
  }

  async close(): Promise<void> {
    this.closing = true;
    if (this.closed) return;
    this.finish();
    await this.process.kill?.();
  }

  private readonly onData = (chunk: Buffer): void => {
    let lines: string[];
    try {
      lines = this.lines.push(chunk);
    } catch (error) {
      this.onerror?.(error as Error);
      void this.close();
      return;
    }
    if (lines.length > 0) this.spokeOnce = true;
    for (const line of lines) {
      let message: JSONRPCMessage;
      try {
        message = parseMessage(line);
      } catch (error) {
        // One malformed line is reported and skipped; the lines after it are still read.
        this.onerror?.(error as Error);
        continue;
      }
      const own = ownAnswerHandler(this.ownRequests, message);
      if (own) {
        own(message as JSONRPCResponse);
        continue;
      }
      const listener = this.ownListeners.size > 0 ? this.listenerOf(message) : undefined;
      if (listener) listener(message as JSONRPCNotification);
      else this.onmessage?.(message);
    }
  };

  /** The own request a server notification is about, if one listens (see `request`). */
  private listenerOf(message: JSONRPCMessage): ((notification: JSONRPCNotification) => void) | undefined {
    if ('id' in message || !('method' in message)) return undefined;
    if (message.method === 'notifications/progress') {
      const token = (message.params as { progressToken?: unknown } | undefined)?.progressToken;
      return typeof token === 'string' ? this.ownListeners.get(token) : undefined;
    }
    if (message.method === 'notifications/message' && this.ownRequests.size === 1) {
      const [only] = this.ownRequests.keys();
      return this.ownListeners.get(only as string);
    }
    return undefined;
  }

  private readonly onStreamError = (error: Error): void => {
    this.onerror?.(error);
  };

  private readonly onEnd = (): void => {
    if (!this.closed) this.finish();
  };

  private finish(): void {
    this.closed = true;
    this.process.stdout.off('data', this.onData);
    this.lines.clear();
    const waiting = [...this.ownRequests.values()];
    this.ownRequests.clear();
    this.ownListeners.clear();
    for (const onAnswer of waiting) onAnswer(TRANSPORT_CLOSED);
    this.onclose?.();
  }
}

/** What answers an own request: the server's response or error, or the transport's end. */
export type OwnAnswer = JSONRPCResponse | typeof TRANSPORT_CLOSED;

export const TRANSPORT_CLOSED = Symbol('transport closed');

/** The handler of an own request that `message` answers (a response, not a request, with its id). */
function ownAnswerHandler(
  requests: Map<string, (answer: OwnAnswer) => void>,
  message: JSONRPCMessage,
): ((answer: OwnAnswer) => void) | undefined {
  const { id } = message as { id?: unknown };
  if (typeof id !== 'string' || requests.size === 0 || 'method' in message) return undefined;
  const handler = requests.get(id);
  if (handler) requests.delete(id);
  return handler;
}

/** As the SDK's stdio transports: 10 MB. */
const DEFAULT_MAX_MESSAGE_BYTES = 10 * 1024 * 1024;

/**
 * Newline-delimited messages from a byte stream. Hand-written rather than the SDK's `ReadBuffer`: that
 * one checks every message against the whole JSON-RPC schema (a zod union), and the SDK's `Protocol`
 * checks it again on receipt; on a busy gateway the first check is a measurable share of a call's CPU.
 */
class MessageLines {
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  constructor(private readonly maxBytes: number) {}

  /** The lines `chunk` completes; throws (and forgets the partial line) when one grows past the limit. */
  push(chunk: Buffer): string[] {
    const lines: string[] = [];
    let start = 0;
    for (let end = chunk.indexOf(NEWLINE); end !== -1; end = chunk.indexOf(NEWLINE, start)) {
      const tail = chunk.subarray(start, end);
      const bytes = this.pending.length === 0 ? tail : Buffer.concat([...this.pending, tail]);
      this.clear();
      if (bytes.length > this.maxBytes) throw tooLong(this.maxBytes);
      lines.push(
        bytes.toString('utf8', 0, bytes.at(-1) === CARRIAGE_RETURN ? bytes.length - 1 : bytes.length),
      );
      start = end + 1;
    }
    if (start < chunk.length) {
      this.pendingBytes += chunk.length - start;
      if (this.pendingBytes > this.maxBytes) {
        this.clear();
        throw tooLong(this.maxBytes);
      }
      this.pending.push(chunk.subarray(start));
    }
    return lines;
  }

  clear(): void {
    this.pending = [];
    this.pendingBytes = 0;
  }
}

const NEWLINE = 0x0a;
const CARRIAGE_RETURN = 0x0d;
const tooLong = (max: number) =>
  new Error(`a message from the process exceeds the maximum size of ${max} bytes`);

/** One JSON-RPC 2.0 message; its shape in detail is the SDK's `Protocol` to check. */
function parseMessage(line: string): JSONRPCMessage {
  const message = JSON.parse(line) as unknown;
  if (typeof message !== 'object' || message === null || Array.isArray(message))
    throw new Error('not a JSON-RPC message: a line must hold one JSON object');
  if ((message as { jsonrpc?: unknown }).jsonrpc !== '2.0')
    throw new Error('not a JSON-RPC 2.0 message: "jsonrpc" must be "2.0"');
  return message as JSONRPCMessage;
}
