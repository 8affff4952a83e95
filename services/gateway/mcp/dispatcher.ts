import {
  CallToolRequestSchema,
  InitializeRequestSchema,
  LATEST_PROTOCOL_VERSION,
  ListToolsRequestSchema,
  PingRequestSchema,
  SetLevelRequestSchema,
  SUPPORTED_PROTOCOL_VERSIONS,
  type CallToolResult,
  type JSONRPCNotification,
  type JSONRPCRequest,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import type { z } from 'zod';
import { isSigilError, SigilError } from '@sigil/plugin-api';
import type { Disconnection } from '../../../core/http/disconnect.ts';
import type { CallOrigin } from '../call-limits.ts';
import { jsonRpcErrorOf } from '../../../core/http/mcp-errors.ts';
import type { ResolvedServer } from '../servers.ts';
import { ErrorCode, errorReply, isPlainObject, type JsonRpcReply } from './jsonrpc.ts';

/** Everything a tool list or call may depend on: who asks, in which session, through which endpoint. */
export interface McpRequestScope {
  /** The authenticated wallet (checksummed), or undefined for an anonymous caller. */
  wallet: string | undefined;
  /** The X-MCP-Session value (state bound to the wallet, not an MCP protocol session). */
  sessionId: string | undefined;
  /**
   * Set on POST /mcp/server/:serverId, admitted once for the request: only that server's tools,
   * un-namespaced, no meta-tools.
   */
  server: ResolvedServer | undefined;
  /** Tells a tool call that the client went away. */
  disconnection: Disconnection;
  /** Payment and other per-call data the client sent in `params._meta`. */
  meta: Record<string, unknown> | undefined;
  /** The HTTP request: tells anonymous callers apart (their limit of calls in flight). */
  origin: CallOrigin;
  /**
   * Sends a notification about this request before its result (the client's event stream); absent
   * when the client accepts only JSON.
   */
  notify: ((notification: JSONRPCNotification) => void) | undefined;
}

/** The tools behind the endpoint; the dispatcher only speaks the protocol. */
export interface McpToolSource {
  listTools(scope: McpRequestScope): Promise<Tool[]>;
  callTool(scope: McpRequestScope, name: string, args: Record<string, unknown>): Promise<CallToolResult>;
}

export interface ServerIdentity {
  name: string;
  version: string;
  instructions?: string;
}

type Handler = (request: JSONRPCRequest, scope: McpRequestScope) => Promise<Record<string, unknown>>;

/**
 * Answers MCP requests statelessly. Written against the SDK's schemas and constants instead of running
 * an SDK `Server` per request: building a server and transport per request costs about 0.33 ms of CPU
 * (a quarter of a bare relay's throughput here), and the SDK reports bad params as -32603 where
 * JSON-RPC requires -32602.
 */
export class McpDispatcher {
  private readonly handlers: ReadonlyMap<string, Handler>;

  constructor(
    private readonly tools: McpToolSource,
    private readonly identity: ServerIdentity,
  ) {
    this.handlers = new Map<string, Handler>([
      ['initialize', (request) => this.initialize(request)],
      ['ping', (request) => (parseParams(PingRequestSchema, request), Promise.resolve({}))],
      // Stateless: no session remembers a level, so every log message of a call is forwarded.
      ['logging/setLevel', (request) => (parseParams(SetLevelRequestSchema, request), Promise.resolve({}))],
      ['tools/list', (request, scope) => this.listTools(request, scope)],
      ['tools/call', (request, scope) => this.callTool(request, scope)],
    ]);
  }

  async dispatch(request: JSONRPCRequest, scope: McpRequestScope): Promise<JsonRpcReply> {
    const handler = this.handlers.get(request.method);
    if (!handler)
      return errorReply(request.id, {
        code: ErrorCode.MethodNotFound,
        message: `Method not found: ${request.method}`,
      });
    try {
      return {
        jsonrpc: '2.0',
        id: request.id,
        result: await handler(request, { ...scope, meta: metaOf(request) }),
      };
    } catch (err) {
      // What is no JSON-RPC error (MCP_ANSWER_BY_CODE) is the HTTP answer of the endpoint.
      const error = isSigilError(err) ? jsonRpcErrorOf(err) : undefined;
      if (error) return errorReply(request.id, error);
      throw err;
    }
  }

  private initialize(request: JSONRPCRequest): Promise<Record<string, unknown>> {
    const { params } = parseParams(InitializeRequestSchema, request);
    const protocolVersion = SUPPORTED_PROTOCOL_VERSIONS.includes(params.protocolVersion)
      ? params.protocolVersion
      : LATEST_PROTOCOL_VERSION;
    return Promise.resolve({
      protocolVersion,
      // Both reach a client only within a POST's event stream (see endpoint.ts and event-stream.ts).
      capabilities: { tools: { listChanged: true }, logging: {} },
      serverInfo: { name: this.identity.name, version: this.identity.version },
      ...(this.identity.instructions ? { instructions: this.identity.instructions } : {}),
    });
  }

  private async listTools(request: JSONRPCRequest, scope: McpRequestScope): Promise<Record<string, unknown>> {
    parseParams(ListToolsRequestSchema, request);
    return { tools: await this.tools.listTools(scope) };
  }

  private async callTool(request: JSONRPCRequest, scope: McpRequestScope): Promise<Record<string, unknown>> {
    const params = plainCallParams(request.params) ?? parseParams(CallToolRequestSchema, request).params;
    return (await this.tools.callTool(scope, params.name, params.arguments ?? {})) as Record<string, unknown>;
  }
}

/**
 * The params of a plain tools/call (a name, and arguments as an object), checked without zod: the
 * SDK schema's parse is a tenth of a busy gateway's CPU per call. Anything else (`_meta`, `task`, a
 * malformed value) is undefined, and the SDK schema decides.
 */
function plainCallParams(params: unknown): { name: string; arguments?: Record<string, unknown> } | undefined {
  if (!isPlainObject(params) || '_meta' in params || 'task' in params) return undefined;
  const { name, arguments: args } = params;
  if (typeof name !== 'string' || !(args === undefined || isPlainObject(args))) return undefined;
  return args === undefined ? { name } : { name, arguments: args };
}

function parseParams<S extends z.ZodType>(schema: S, request: JSONRPCRequest): z.infer<S> {
  const parsed = schema.safeParse({ method: request.method, params: request.params });
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  throw new SigilError(
    'invalid_request',
    `Invalid params: ${issue ? `${issue.path.join('.')}: ${issue.message}` : 'rejected'}`,
  );
}

function metaOf(request: JSONRPCRequest): Record<string, unknown> | undefined {
  const meta = (request.params as { _meta?: unknown } | undefined)?._meta;
  return typeof meta === 'object' && meta !== null ? (meta as Record<string, unknown>) : undefined;
}
