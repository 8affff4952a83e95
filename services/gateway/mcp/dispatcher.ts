import {
  CallToolRequestSchema,
  InitializeRequestSchema,
  LATEST_PROTOCOL_VERSION,
  ListToolsRequestSchema,
  PingRequestSchema,
  SetLevelRequestSchema,
  SUPPORTED_PROTOCOL_VERSIONS,
  type JSONRPCNotification,
  type JSONRPCRequest,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import type { z } from 'zod';
import { isSigilError, SigilError } from '@sigil/plugin-api';
import type { Disconnection } from '../../../core/http/disconnect.ts';
import type { InputRetry, ToolCallOutcome } from '../../../core/mcp/call-tool.ts';
import type { CallOrigin } from '../call-limits.ts';
import { httpStatusOf, jsonRpcErrorOf } from '../../../core/http/mcp-errors.ts';
import type { ResolvedServer } from '../servers.ts';
import type { CacheHints } from './cache-hints.ts';
import { ErrorCode, errorReply, isPlainObject, plainMeta, type JsonRpcReply } from './jsonrpc.ts';
import { ENVELOPE } from '../../../core/mcp/era.ts';
import { MODERN_METHODS, MODERN_VERSIONS, type Revision } from './revision.ts';

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
  /** The protocol revision the request is served at (revision.ts), with a modern client's envelope. */
  revision: Revision;
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
  /** `retry`: a 2026-07-28 client's retry of a call it was answered `input_required` for. */
  callTool(
    scope: McpRequestScope,
    name: string,
    args: Record<string, unknown>,
    retry?: InputRetry,
  ): Promise<ToolCallOutcome>;
}

export interface ServerIdentity {
  name: string;
  version: string;
  instructions?: string;
}

/** The answer to one request, and the HTTP status it goes with (when it is not streamed). */
export interface Dispatched {
  status: number;
  reply: JsonRpcReply;
}

type Handler = (request: JSONRPCRequest, scope: McpRequestScope) => Promise<Record<string, unknown>>;

/** What a 2026-07-28 client is told the gateway serves: tools, and log messages on request. */
const MODERN_CAPABILITIES = Object.freeze({ tools: {}, logging: {} });

/**
 * Answers MCP requests statelessly, at the revision each request names (revision.ts): 2025-11-25 and
 * older after `initialize`, as always; 2026-07-28 with `server/discover`, cache hints on lists, and
 * `resultType` and the server's identity on every result. Written against the SDK's schemas and
 * constants instead of running an SDK `Server` per request: building a server and transport per
 * request costs about 0.33 ms of CPU (a quarter of a bare relay's throughput here), and the SDK
 * reports bad params as -32603 where JSON-RPC requires -32602.
 */
export class McpDispatcher {
  private readonly legacy: ReadonlyMap<string, Handler>;
  private readonly modern: ReadonlyMap<string, Handler>;
  /** `_meta["io.modelcontextprotocol/serverInfo"]` of modern results, one frozen object per endpoint. */
  private readonly serverInfo = new Map<string, Readonly<{ name: string; version: string }>>();

  constructor(
    private readonly tools: McpToolSource,
    private readonly identity: ServerIdentity,
    private readonly hints: CacheHints,
  ) {
    const listTools: Handler = (request, scope) => this.listTools(request, scope);
    const callTool: Handler = (request, scope) => this.callTool(request, scope);
    this.legacy = new Map<string, Handler>([
      ['initialize', (request) => this.initialize(request)],
      ['ping', (request) => (parseParams(PingRequestSchema, request), Promise.resolve({}))],
      // Stateless: no session remembers a level, so every log message of a call is forwarded.
      ['logging/setLevel', (request) => (parseParams(SetLevelRequestSchema, request), Promise.resolve({}))],
      ['tools/list', listTools],
      ['tools/call', callTool],
    ]);
    this.modern = new Map<string, Handler>([
      ['server/discover', (_request, scope) => Promise.resolve(this.discover(scope))],
      ['tools/list', listTools],
      ['tools/call', callTool],
    ]);
    const served = [...this.modern.keys()].sort().join();
    if (served !== [...MODERN_METHODS].sort().join())
      throw new Error(`the modern handlers (${served}) are not MODERN_METHODS`);
  }

  async dispatch(request: JSONRPCRequest, scope: McpRequestScope): Promise<Dispatched> {
    const { era } = scope.revision;
    const handler = (era === 'modern' ? this.modern : this.legacy).get(request.method);
    if (!handler) {
      const reply = errorReply(request.id, {
        code: ErrorCode.MethodNotFound,
        message: `Method not found: ${request.method}`,
      });
      return { status: 200, reply };
    }
    try {
      const result = await handler(request, { ...scope, meta: metaOf(request) });
      const reply: JsonRpcReply = {
        jsonrpc: '2.0',
        id: request.id,
        result: era === 'modern' ? this.complete(result, scope) : result,
      };
      return { status: 200, reply };
    } catch (err) {
      // What is no JSON-RPC error (MCP_ANSWER_BY_CODE) is the HTTP answer of the endpoint.
      if (isSigilError(err)) {
        const error = jsonRpcErrorOf(err, era);
        if (error) return { status: httpStatusOf(err), reply: errorReply(request.id, error) };
      }
      throw err;
    }
  }

  /**
   * A modern result: `resultType: "complete"` (or a relayed `input_required`, kept) and the server's
   * identity in `_meta` (beside a payment receipt and the execution proof, whose hash leaves out
   * both: see proofs.ts).
   */
  private complete(result: Record<string, unknown>, scope: McpRequestScope): Record<string, unknown> {
    const meta = result._meta as Record<string, unknown> | undefined;
    return {
      ...result,
      resultType: result.resultType === 'input_required' ? 'input_required' : 'complete',
      _meta: { ...meta, [ENVELOPE.serverInfo]: this.serverInfoOf(scope) },
    };
  }

  /**
   * The identity a modern client keys its cache by: a per-server endpoint is a server of its own
   * (`sigil-gateway/<serverId>`), so a public tool list of one is never served for another.
   */
  private serverInfoOf(scope: McpRequestScope): Readonly<{ name: string; version: string }> {
    const key = scope.server?.entry.id ?? '';
    let info = this.serverInfo.get(key);
    if (!info) {
      const name = key === '' ? this.identity.name : `${this.identity.name}/${key}`;
      info = Object.freeze({ name, version: this.identity.version });
      this.serverInfo.set(key, info);
    }
    return info;
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

  /**
   * `server/discover` (2026-07-28): the revisions served per request (the modern ones only: older
   * clients negotiate with `initialize`), the capabilities and the instructions `initialize` gives.
   * No `listChanged`: there is no `subscriptions/listen` stream to announce a change on.
   */
  private discover(scope: McpRequestScope): Record<string, unknown> {
    return {
      supportedVersions: MODERN_VERSIONS,
      capabilities: MODERN_CAPABILITIES,
      ...(this.identity.instructions ? { instructions: this.identity.instructions } : {}),
      ...this.hints.discover(),
      // The SDK v2 client reads the server's identity from here.
      _meta: { [ENVELOPE.serverInfo]: this.serverInfoOf(scope) },
    };
  }

  private async listTools(request: JSONRPCRequest, scope: McpRequestScope): Promise<Record<string, unknown>> {
    parseParams(ListToolsRequestSchema, request);
    const tools = await this.tools.listTools(scope);
    if (scope.revision.era === 'legacy') return { tools };
    return { tools: withoutExecution(tools), ...this.hints.toolList(scope.server !== undefined) };
  }

  private async callTool(request: JSONRPCRequest, scope: McpRequestScope): Promise<Record<string, unknown>> {
    const params = plainCallParams(request.params) ?? parseParams(CallToolRequestSchema, request).params;
    const retry = scope.revision.era === 'modern' ? retryOf(request.params) : undefined;
    return (await this.tools.callTool(scope, params.name, params.arguments ?? {}, retry)) as Record<
      string,
      unknown
    >;
  }
}

/**
 * The tools as 2026-07-28 lists them: without `execution` (task support), which that revision
 * removed; the same objects when none has it.
 */
function withoutExecution(tools: Tool[]): Tool[] {
  if (!tools.some((tool) => 'execution' in tool)) return tools;
  return tools.map((tool) => {
    if (!('execution' in tool)) return tool;
    const { execution: _removed, ...rest } = tool;
    return rest;
  });
}

/**
 * The params of a plain tools/call (a name, arguments as an object, and a `_meta` the SDK schema would
 * accept, such as a 2026-07-28 envelope or a payment), checked without zod: the SDK schema's parse is
 * a tenth of a busy gateway's CPU per call. Anything else (`task`, a malformed value) is undefined,
 * and the SDK schema decides.
 */
function plainCallParams(params: unknown): { name: string; arguments?: Record<string, unknown> } | undefined {
  if (!isPlainObject(params) || 'task' in params || !plainMeta(params)) return undefined;
  const { name, arguments: args } = params;
  if (typeof name !== 'string' || !(args === undefined || isPlainObject(args))) return undefined;
  return args === undefined ? { name } : { name, arguments: args };
}

/**
 * A 2026-07-28 retry's `inputResponses` (an object, passed on as it is) and `requestState` (a
 * string): undefined when the call carries neither, -32602 when either has another type.
 */
function retryOf(params: unknown): InputRetry | undefined {
  if (!isPlainObject(params) || !('inputResponses' in params || 'requestState' in params)) return undefined;
  const { inputResponses, requestState } = params;
  if (inputResponses !== undefined && !isPlainObject(inputResponses))
    throw new SigilError('invalid_request', 'Invalid params: inputResponses: expected an object');
  if (requestState !== undefined && typeof requestState !== 'string')
    throw new SigilError('invalid_request', 'Invalid params: requestState: expected a string');
  return {
    ...(inputResponses !== undefined && { inputResponses }),
    ...(requestState !== undefined && { requestState }),
  };
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
