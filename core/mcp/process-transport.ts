import { ReadBuffer, serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';

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

  private readonly readBuffer: ReadBuffer;
  private closed = false;
  private started = false;
  private corked = false;
  private readonly drainWaiters: (() => void)[] = [];

  constructor(
    private readonly process: ProcessStdio,
    private readonly options: ProcessStdioTransportOptions = {},
  ) {
    this.readBuffer = new ReadBuffer(
      options.maxMessageBytes === undefined ? undefined : { maxBufferSize: options.maxMessageBytes },
    );
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
    return new Promise((resolve, reject) => {
      const { stdin } = this.process;
      this.corkUntilNextTick(stdin);
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
   * Messages sent in one tick (many concurrent calls to a busy server) leave in one write: a pipe
   * write is a system call, and a busy gateway would otherwise make one per message.
   */
  private corkUntilNextTick(stdin: NodeJS.WritableStream): void {
    const corkable = stdin as NodeJS.WritableStream & { cork?: () => void; uncork?: () => void };
    if (this.corked || !corkable.cork || !corkable.uncork) return;
    corkable.cork();
    this.corked = true;
    process.nextTick(() => {
      this.corked = false;
      corkable.uncork?.();
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.finish();
    await this.process.kill?.();
  }

  private readonly onData = (chunk: Buffer): void => {
    try {
      this.readBuffer.append(chunk);
    } catch (error) {
      this.onerror?.(error as Error);
      void this.close();
      return;
    }
    for (;;) {
      let message: JSONRPCMessage | null;
      try {
        message = this.readBuffer.readMessage();
      } catch (error) {
        // One malformed line is reported and skipped; the lines after it are still read.
        this.onerror?.(error as Error);
        continue;
      }
      if (message === null) break;
      this.onmessage?.(message);
    }
  };

  private readonly onStreamError = (error: Error): void => {
    this.onerror?.(error);
  };

  private readonly onEnd = (): void => {
    if (!this.closed) this.finish();
  };

  private finish(): void {
    this.closed = true;
    this.process.stdout.off('data', this.onData);
    this.readBuffer.clear();
    this.onclose?.();
  }
}
