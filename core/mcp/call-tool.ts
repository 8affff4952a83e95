import {
  CallToolResultSchema,
  ErrorCode,
  LoggingMessageNotificationSchema,
  McpError,
  ProgressNotificationSchema,
  type CallToolResult,
  type JSONRPCNotification,
  type LoggingMessageNotificationParams,
  type Progress,
} from '@modelcontextprotocol/sdk/types.js';
import type { Disconnection } from '../http/disconnect.ts';
import { TRANSPORT_CLOSED, type OwnAnswer, type ProcessStdioTransport } from './process-transport.ts';

/** Hears what a server reports about a call while it runs. */
export interface CallObserver {
  /** The server's progress reports (it is asked for them only when this is set), without its token. */
  onProgress?: (progress: Progress) => void;
  /**
   * The server's log messages while this is the only call in flight on its process: over stdio a log
   * message names no request, so only then is it known to be about this call.
   */
  onLog?: (message: LoggingMessageNotificationParams) => void;
}

export interface CallToolOptions extends CallObserver {
  timeoutMs: number;
  /** When the requester goes away, the server is told (notifications/cancelled) and the call ends. */
  disconnection?: Disconnection;
}

/** The call ended because its requester went away; nothing is known to be wrong with the server. */
export class CallCancelled extends Error {
  constructor() {
    super('the requester went away');
  }
}

/**
 * `tools/call` over a process's stdio, beside the SDK `Client` that initialized it and without its
 * `Protocol`, with the client's semantics for a server whose tools it never listed (the gateway's
 * pooled servers): the result checked against the SDK's CallToolResultSchema; a JSON-RPC error as an
 * McpError; after `timeoutMs` an McpError(RequestTimeout) and notifications/cancelled to the server;
 * the process's end an McpError(ConnectionClosed). Hand-written because the Protocol's bookkeeping per
 * request (an AbortSignal and its listener, a zod check of every answer's envelope, a timer record and
 * several closures) was a sixth of a busy gateway's CPU per call.
 */
export function callTool(
  transport: ProcessStdioTransport,
  name: string,
  args: Record<string, unknown>,
  options: CallToolOptions,
): Promise<CallToolResult> {
  return new Promise(
    (resolve, reject) => new PendingToolCall(transport, name, args, options, resolve, reject),
  );
}

/** One call in flight. A class, not closures: under tsx each named closure per call costs a defineProperty. */
class PendingToolCall {
  private settled = false;
  private readonly timer: NodeJS.Timeout;
  private readonly request: { id: string; sent: Promise<void> };

  constructor(
    private readonly transport: ProcessStdioTransport,
    name: string,
    args: Record<string, unknown>,
    private readonly options: CallToolOptions,
    private readonly resolve: (result: CallToolResult) => void,
    private readonly reject: (error: unknown) => void,
  ) {
    const listens = options.onProgress !== undefined || options.onLog !== undefined;
    this.request = transport.request(
      'tools/call',
      { name, arguments: args },
      (answer) => this.answered(answer),
      listens ? (notification) => this.heard(notification) : undefined,
    );
    this.timer = setTimeout(() => this.timedOut(), options.timeoutMs);
    options.disconnection?.whenGone(() => this.giveUp(new CallCancelled(), 'the client went away'));
    this.request.sent.catch((error: unknown) => this.failed(error));
  }

  private answered(answer: OwnAnswer): void {
    if (!this.settle()) return;
    if (answer === TRANSPORT_CLOSED) {
      this.reject(new McpError(ErrorCode.ConnectionClosed, 'Connection closed'));
    } else if ('error' in answer) {
      this.reject(new McpError(answer.error.code, answer.error.message, answer.error.data));
    } else {
      const parsed = CallToolResultSchema.safeParse(answer.result);
      if (parsed.success) this.resolve(parsed.data);
      else this.reject(parsed.error);
    }
  }

  /** A notification the server sent about this call; one that breaks the protocol is dropped. */
  private heard(notification: JSONRPCNotification): void {
    const { onProgress, onLog } = this.options;
    if (notification.method === 'notifications/progress' && onProgress) {
      const parsed = ProgressNotificationSchema.safeParse(notification);
      if (!parsed.success) return;
      const { progressToken: _ownToken, _meta: _ignored, ...progress } = parsed.data.params;
      onProgress(progress);
    } else if (notification.method === 'notifications/message' && onLog) {
      const parsed = LoggingMessageNotificationSchema.safeParse(notification);
      if (parsed.success) onLog(parsed.data.params);
    }
  }

  private timedOut(): void {
    const { timeoutMs } = this.options;
    this.giveUp(
      new McpError(ErrorCode.RequestTimeout, 'Request timed out', { timeout: timeoutMs }),
      `timed out after ${timeoutMs} ms`,
    );
  }

  /** Ends the call without its answer and tells the server, which may stop working on it. */
  private giveUp(error: Error, reason: string): void {
    if (!this.settle()) return;
    this.transport
      .send({
        jsonrpc: '2.0',
        method: 'notifications/cancelled',
        params: { requestId: this.request.id, reason },
      })
      .catch(() => undefined); // a server that cannot be told is being stopped anyway
    this.reject(error);
  }

  private failed(error: unknown): void {
    if (this.settle()) this.reject(error);
  }

  /** True the first time only: whatever ends the call first decides it. */
  private settle(): boolean {
    if (this.settled) return false;
    this.settled = true;
    clearTimeout(this.timer);
    this.transport.forget(this.request.id);
    return true;
  }
}
