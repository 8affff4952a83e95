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
import { z } from 'zod';
import type { Disconnection } from '../http/disconnect.ts';
import { ENVELOPE, type ModernEnvelopes } from './era.ts';
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
  /**
   * A modern server: what its request's envelope says of the client the call is made for. Its
   * capabilities are what an `input_required` result may ask of it (none when absent); its log level,
   * the least severe message the server sends (`debug` when absent, and only while `onLog` listens).
   */
  caller?: { clientCapabilities?: Record<string, unknown>; logLevel?: string };
  /** A modern server: the retry of a call it answered `input_required`, with the client's answers. */
  retry?: InputRetry;
}

/** What a client sends again with a call that needed input: its answers, and the server's state echoed. */
export interface InputRetry {
  inputResponses?: Record<string, unknown>;
  requestState?: string;
}

/** The methods an `input_required` result may embed (MCP 2026-07-28, "Multi-round requests"). */
export const INPUT_REQUEST_METHODS = ['elicitation/create', 'sampling/createMessage', 'roots/list'] as const;

const InputRequiredSchema = z
  .object({
    resultType: z.literal('input_required'),
    inputRequests: z
      .record(
        z.string(),
        z.looseObject({
          method: z.enum(INPUT_REQUEST_METHODS),
          params: z.record(z.string(), z.unknown()).optional(),
        }),
      )
      .optional(),
    requestState: z.string().optional(),
  })
  .refine((result) => result.inputRequests !== undefined || result.requestState !== undefined, {
    message: 'an input_required result has inputRequests, requestState or both',
  });

/** A modern server's answer that a call needs the client's input before it can run. */
export type InputRequired = z.infer<typeof InputRequiredSchema>;

/** What a tools/call ends with: the tool's result, or (a modern server only) its request for input. */
export type ToolCallOutcome = CallToolResult | InputRequired;

export const isInputRequired = (outcome: ToolCallOutcome): outcome is InputRequired =>
  (outcome as { resultType?: unknown }).resultType === 'input_required';

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
 *
 * `modern`: the server speaks 2026-07-28 (core/mcp/era.ts): every call carries the envelope, may be a
 * retry with the client's input, and is answered with a `resultType`. A complete result is returned
 * as a 2025-11-25 server would return it (without `resultType` and the server's identity in `_meta`);
 * `input_required` is returned as it came, checked.
 */
export function callTool(
  transport: ProcessStdioTransport,
  name: string,
  args: Record<string, unknown>,
  options: CallToolOptions,
  modern?: ModernEnvelopes,
): Promise<ToolCallOutcome> {
  return new Promise(
    (resolve, reject) => new PendingToolCall(transport, name, args, options, modern, resolve, reject),
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
    private readonly modern: ModernEnvelopes | undefined,
    private readonly resolve: (result: ToolCallOutcome) => void,
    private readonly reject: (error: unknown) => void,
  ) {
    const listens = options.onProgress !== undefined || options.onLog !== undefined;
    this.request = transport.request(
      'tools/call',
      modern ? modernParams(modern, name, args, options) : { name, arguments: args },
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
    } else if (this.modern) {
      this.answeredModern(answer.result);
    } else {
      const parsed = CallToolResultSchema.safeParse(answer.result);
      if (parsed.success) this.resolve(parsed.data);
      else this.reject(parsed.error);
    }
  }

  /**
   * A modern server's result, by its `resultType`: `complete` (or none) is the tool's result without
   * the framing, `input_required` its request for input; any other breaks the protocol.
   */
  private answeredModern(result: Record<string, unknown>): void {
    const { resultType, ...rest } = result;
    if (resultType === 'input_required') {
      const parsed = InputRequiredSchema.safeParse(result);
      if (parsed.success) this.resolve(parsed.data);
      else this.reject(parsed.error);
      return;
    }
    if (resultType !== undefined && resultType !== 'complete') {
      this.reject(new Error(`the server answered tools/call with an unknown resultType`));
      return;
    }
    const parsed = CallToolResultSchema.safeParse(withoutServerInfo(rest));
    if (parsed.success) this.resolve(parsed.data);
    else this.reject(parsed.error);
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

/** The params of a call to a modern server: the envelope in `_meta`, and a retry's input. */
function modernParams(
  envelopes: ModernEnvelopes,
  name: string,
  args: Record<string, unknown>,
  { caller, retry, onLog }: CallToolOptions,
): Record<string, unknown> {
  // Log messages only while someone listens (the server must send none without a level).
  const logLevel = onLog ? (caller?.logLevel ?? 'debug') : undefined;
  const params: Record<string, unknown> = {
    name,
    arguments: args,
    _meta: envelopes.of(caller?.clientCapabilities, logLevel),
  };
  if (retry?.inputResponses !== undefined) params.inputResponses = retry.inputResponses;
  if (retry?.requestState !== undefined) params.requestState = retry.requestState;
  return params;
}

/**
 * A modern result without the server's identity in `_meta` (the gateway answers as a server of its
 * own), and without a `_meta` that held nothing else: as a 2025-11-25 server returns it.
 */
function withoutServerInfo(result: Record<string, unknown>): Record<string, unknown> {
  const meta = result._meta as Record<string, unknown> | undefined;
  if (typeof meta !== 'object' || meta === null || !(ENVELOPE.serverInfo in meta)) return result;
  const { [ENVELOPE.serverInfo]: _identity, ...others } = meta;
  const { _meta: _framed, ...rest } = result;
  return Object.keys(others).length === 0 ? rest : { ...rest, _meta: others };
}
