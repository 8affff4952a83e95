import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { ensure, excerpt, expectShape, failWith, notApplicableBecause } from '@sigil/plugin-api/kit';
import type { HttpClient, HttpResponse } from '../http.ts';
import { MCP_PAYMENT_META_KEY } from '../x402.ts';
import type { DeploymentContext } from './context.ts';
import { expectStatus } from './expect.ts';
import { requiredOfMcp, type Payment } from './payer.ts';

/**
 * A minimal MCP client over Streamable HTTP, written for the runner instead of taken from an SDK so
 * that every exchange goes through `context.http` (recorded, redacted) and a check sees exactly what
 * the gateway answered: the HTTP status, malformed replies, JSON-RPC errors.
 */

/** Protocol revisions this runner speaks; it asks for the first and accepts any of them back. */
export const KNOWN_PROTOCOL_VERSIONS = ['2025-06-18', '2025-11-25', '2025-03-26', '2024-11-05'] as const;
export const REQUESTED_PROTOCOL_VERSION = KNOWN_PROTOCOL_VERSIONS[0];

/**
 * MCP 2026-07-28 has no handshake: every request names its revision and its client's capabilities in
 * `params._meta`, mirrors its version, method and tool name into headers, and is answered alone.
 */
export const MODERN_PROTOCOL_VERSION = '2026-07-28';

/** The reserved `_meta` keys of a 2026-07-28 request and result (MCP 2026-07-28, basic, `_meta`). */
export const MODERN_META = {
  protocolVersion: 'io.modelcontextprotocol/protocolVersion',
  clientCapabilities: 'io.modelcontextprotocol/clientCapabilities',
  clientInfo: 'io.modelcontextprotocol/clientInfo',
  serverInfo: 'io.modelcontextprotocol/serverInfo',
} as const;

const CLIENT_INFO = { name: 'sigil-conformance', version: '1.0.0' };

/** Streamable HTTP: a client accepts both a JSON answer and an event stream. */
const ACCEPT = 'application/json, text/event-stream';

const requestId = z.union([z.string(), z.number()]);

export const jsonRpcErrorSchema = z.object({
  jsonrpc: z.literal('2.0'),
  id: requestId.nullable(),
  error: z.object({ code: z.number().int(), message: z.string(), data: z.unknown().optional() }),
});
export type JsonRpcErrorReply = z.infer<typeof jsonRpcErrorSchema>;

export const jsonRpcResultSchema = z.object({
  jsonrpc: z.literal('2.0'),
  id: requestId,
  result: z.record(z.string(), z.unknown()),
});

export interface McpReply {
  response: HttpResponse;
  /** The JSON-RPC message answering the request, from a JSON body or an event stream. */
  message: unknown;
  /** The id the request carried (undefined for raw text and notifications). */
  id: unknown;
}

export interface McpTool {
  name: string;
  description?: string | undefined;
  inputSchema: Record<string, unknown>;
}

const toolSchema = z.object({
  name: z.string().min(1),
  description: z.string().optional(),
  inputSchema: z.record(z.string(), z.unknown()),
});

/** A tools/list result, read only for its tool names (a gateway's tools may carry anything else). */
export const toolNamesSchema = z.object({ tools: z.array(z.object({ name: z.string().min(1) }).loose()) });

/** Tool names sorted and joined, to compare two lists in a reason. */
export const toolNames = (tools: readonly { name: string }[]): string =>
  tools
    .map((tool) => tool.name)
    .sort()
    .join(', ');

export const callToolResultSchema = z.object({
  content: z.array(z.object({ type: z.string() }).loose()),
  isError: z.boolean().optional(),
});
export type CallToolResult = z.infer<typeof callToolResultSchema>;

/** Posts one JSON-RPC message (an object, or raw text to send malformed JSON) to an MCP path. */
export async function postMcp(
  context: { http: HttpClient },
  path: string,
  message: Record<string, unknown> | string,
  headers: Record<string, string> = {},
  timeoutMs?: number,
): Promise<McpReply> {
  const response = await context.http.request({
    service: 'gateway',
    method: 'POST',
    path,
    headers: { accept: ACCEPT, ...headers },
    ...(typeof message === 'string' ? { rawJson: message } : { json: message }),
    ...(timeoutMs === undefined ? {} : { timeoutMs }),
  });
  const id = typeof message === 'string' ? undefined : message.id;
  return { response, message: readMessage(response, id), id };
}

/** The JSON-RPC message of a reply: the JSON body, or the stream event answering `id`. */
function readMessage(response: HttpResponse, id: unknown): unknown {
  if (!(response.headers.get('content-type') ?? '').includes('text/event-stream')) return response.body;
  const messages = response.text
    .split(/\r?\n\r?\n/)
    .map((event) =>
      event
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trimStart())
        .join('\n'),
    )
    .filter((data) => data !== '')
    .flatMap((data) => {
      try {
        return [JSON.parse(data) as unknown];
      } catch {
        return [];
      }
    });
  const answers = messages.filter(
    (m) => typeof m === 'object' && m !== null && ('result' in m || 'error' in m),
  );
  return answers.find((m) => (m as { id?: unknown }).id === id) ?? answers[0];
}

/** A JSON-RPC error reply, checked: `what` names the request in reasons. */
export function expectJsonRpcError(reply: McpReply, code: number, what: string): JsonRpcErrorReply {
  const { response } = reply;
  ensure(
    response.status < 500,
    `${what}: the gateway answered HTTP ${response.status}, a server error, instead of a JSON-RPC error ${code}`,
  );
  if (reply.message === undefined) {
    failWith(
      `${what}: expected a JSON-RPC error ${code}, got HTTP ${response.status} without a JSON-RPC message` +
        (response.text === '' ? '' : `: ${excerpt(response.text.replace(/\s+/g, ' '), 200)}`),
    );
  }
  const error = expectShape(jsonRpcErrorSchema, reply.message, `${what}: the reply is not a JSON-RPC error`);
  ensure(
    error.error.code === code,
    `${what}: expected JSON-RPC error ${code}, got ${error.error.code} (${error.error.message})`,
  );
  return error;
}

/** True for a reply that carries a JSON-RPC error rather than a result. */
export function isJsonRpcError(reply: McpReply): boolean {
  return jsonRpcErrorSchema.safeParse(reply.message).success;
}

/** What a tester gives the runner so that it pays for calls. */
export const PAYER_OPTIONS =
  'lend the runner a funded payer with --payer-key (or SIGIL_CONFORMANCE_PAYER_KEY), and --rpc-url for the checks that read balances';

/**
 * A tool call (or POST /api/verify) that still asks for a payment: HTTP 402, an x402 PaymentRequired,
 * or a JSON-RPC or tool error naming a payment. Without a payer the check is not applicable (the
 * payment requirements judge the payment flow itself); with one, the runner has paid already, so a
 * gateway that still asks refused a good payment: a failure.
 */
export function notApplicableIfPaymentRequired(
  reply: { response: HttpResponse; message?: unknown },
  context: DeploymentContext,
): void {
  const required = requiredOfMcp(reply);
  const text = JSON.stringify(reply.message ?? reply.response.body ?? '');
  const asks =
    reply.response.status === 402 ||
    required !== undefined ||
    (/payment[ _-]?required|x402/i.test(text) && /"(error|isError)"/.test(text));
  if (!asks) return;
  const seen = reply.response.status === 402 ? 'HTTP 402' : excerpt(text, 160);
  if (!context.payer) {
    notApplicableBecause(
      `the deployment requires an x402 payment (${seen}); ${PAYER_OPTIONS} to check paid calls`,
    );
  }
  if (required === undefined) {
    notApplicableBecause(
      `the deployment asks for a payment the runner cannot read, no x402 v2 PaymentRequired (${seen}); GW-4.x402-payment-required judges that`,
    );
  }
  failWith(
    `the runner paid as asked and the gateway still asks for a payment (${seen}${required.error === undefined ? '' : `: ${required.error}`})`,
  );
}

/**
 * One MCP client connection to a path. At 2025-11-25 (`open`) the handshake is done and its headers
 * are carried on every request; at 2026-07-28 (`modern`) there is none, and every request carries
 * the `_meta` envelope and the standard headers instead.
 */
export class McpConnection {
  private nextId = 1;

  private constructor(
    readonly context: DeploymentContext,
    readonly path: string,
    private readonly headers: Record<string, string>,
    /** What the gateway answered to initialize; undefined at 2026-07-28, which has no handshake. */
    readonly initialized: Record<string, unknown> | undefined,
  ) {}

  /** True when every request is sent at 2026-07-28 (no handshake, the envelope in each request). */
  get modern(): boolean {
    return this.initialized === undefined;
  }

  /** A 2026-07-28 client of a path: no request is sent until one is asked for. */
  static modern(
    context: DeploymentContext,
    path: string,
    headers: Record<string, string> = {},
  ): McpConnection {
    return new McpConnection(context, path, headers, undefined);
  }

  /**
   * initialize, then notifications/initialized, as a client does; the negotiated protocol version
   * and any protocol session id the gateway hands out go on every later request.
   */
  static async open(
    context: DeploymentContext,
    path: string,
    headers: Record<string, string> = {},
  ): Promise<McpConnection> {
    const reply = await postMcp(context, path, initializeRequest(0), headers);
    const result = expectResult(reply, `initialize at POST ${path}`);
    const version = typeof result.protocolVersion === 'string' ? result.protocolVersion : undefined;
    ensure(
      version !== undefined && (KNOWN_PROTOCOL_VERSIONS as readonly string[]).includes(version),
      `initialize at POST ${path} answered protocolVersion ${JSON.stringify(result.protocolVersion)}, none this runner speaks (${KNOWN_PROTOCOL_VERSIONS.join(', ')})`,
    );
    const session = reply.response.headers.get('mcp-session-id');
    const carried = {
      ...headers,
      'mcp-protocol-version': version,
      ...(session === null ? {} : { 'mcp-session-id': session }),
    };
    const notified = await postMcp(
      context,
      path,
      { jsonrpc: '2.0', method: 'notifications/initialized' },
      carried,
    );
    ensure(
      notified.response.status === 202 || notified.response.status === 200,
      `notifications/initialized at POST ${path}: expected HTTP 202, got ${notified.response.status}`,
    );
    return new McpConnection(context, path, carried, result);
  }

  /** Sends a request and returns the reply as it came. */
  send(method: string, params?: Record<string, unknown>, timeoutMs?: number): Promise<McpReply> {
    const id = this.nextId++;
    if (this.modern) {
      const modern = modernRequest(id, method, params);
      return postMcp(
        this.context,
        this.path,
        modern.message,
        { ...this.headers, ...modern.headers },
        timeoutMs,
      );
    }
    return postMcp(
      this.context,
      this.path,
      { jsonrpc: '2.0', id, method, ...(params === undefined ? {} : { params }) },
      this.headers,
      timeoutMs,
    );
  }

  /** The result of a reply that must succeed; at 2026-07-28 it must say it is complete. */
  result(reply: McpReply, what: string): Record<string, unknown> {
    return this.modern ? expectCompleteResult(reply, what) : expectResult(reply, what);
  }

  /** Sends a request that must succeed; returns its result. */
  async request(
    method: string,
    params?: Record<string, unknown>,
    timeoutMs?: number,
  ): Promise<Record<string, unknown>> {
    return this.result(
      await this.send(method, params, timeoutMs),
      `${this.what(method)} at POST ${this.path}`,
    );
  }

  /** A method as reasons name it: with the revision when it is 2026-07-28. */
  what(method: string): string {
    return this.modern ? `${method} (MCP ${MODERN_PROTOCOL_VERSION})` : method;
  }

  async listTools(): Promise<McpTool[]> {
    const result = await this.request('tools/list', {});
    return expectShape(z.object({ tools: z.array(toolSchema) }), result, `tools/list at POST ${this.path}`)
      .tools as McpTool[];
  }

  /**
   * A tools/call as it came back, paid when the gateway asks for a payment and the tester lent a
   * payer: x402's MCP transport, the payment in `params._meta["x402/payment"]`.
   */
  async callToolReply(
    name: string,
    args: Record<string, unknown>,
    timeoutMs = CALL_TIMEOUT_MS,
  ): Promise<McpReply & { payment?: Payment }> {
    const reply = await this.send('tools/call', { name, arguments: args }, timeoutMs);
    const { payer } = this.context;
    const required = payer ? requiredOfMcp(reply) : undefined;
    if (!payer || !required) return reply;
    const payment = await payer.pay(
      required,
      this.context.evidence,
      `tools/call ${name} at POST ${this.path}`,
    );
    const paid = await this.send(
      'tools/call',
      { name, arguments: args, _meta: { [MCP_PAYMENT_META_KEY]: payment.payload } },
      timeoutMs,
    );
    return { ...paid, payment };
  }

  /** A tools/call that must come back as a CallToolResult (which may still be a tool error). */
  async callTool(
    name: string,
    args: Record<string, unknown>,
    timeoutMs = CALL_TIMEOUT_MS,
  ): Promise<CallToolResult> {
    const reply = await this.callToolReply(name, args, timeoutMs);
    notApplicableIfPaymentRequired(reply, this.context);
    const result = this.result(reply, `${this.what('tools/call')} ${name} at POST ${this.path}`);
    return expectShape(
      callToolResultSchema,
      result,
      `tools/call ${name}: the result is not a CallToolResult`,
    );
  }
}

/**
 * GET or DELETE on an MCP endpoint: 405 with an Allow that names POST (RFC 9110 section 15.5.6).
 * `what` names the request in reasons.
 */
export async function expectMethodNotAllowed(
  context: DeploymentContext,
  method: 'GET' | 'DELETE',
  path: string,
  headers: Record<string, string>,
  what: string,
): Promise<void> {
  const response = await context.http.request({ service: 'gateway', method, path, headers });
  expectStatus(response, 405, what);
  const allow = response.headers.get('allow');
  ensure(
    (allow ?? '')
      .split(',')
      .map((name) => name.trim().toUpperCase())
      .includes('POST'),
    `${what} answered 405 with Allow: ${JSON.stringify(allow)}, which does not name POST`,
  );
}

/** A tool call may install and start a server on demand; that can take a while on a cold gateway. */
export const CALL_TIMEOUT_MS = 45_000;

export function initializeRequest(id: number | string, protocolVersion: string = REQUESTED_PROTOCOL_VERSION) {
  return {
    jsonrpc: '2.0',
    id,
    method: 'initialize',
    params: {
      protocolVersion,
      capabilities: {},
      clientInfo: { name: 'sigil-conformance', version: '1.0.0' },
    },
  };
}

/** The `_meta` envelope of a 2026-07-28 request: its version, no client capabilities, the runner's name. */
export function modernEnvelope(version: string = MODERN_PROTOCOL_VERSION): Record<string, unknown> {
  return {
    [MODERN_META.protocolVersion]: version,
    [MODERN_META.clientCapabilities]: {},
    [MODERN_META.clientInfo]: CLIENT_INFO,
  };
}

/** Where `Mcp-Name` comes from, by method (MCP 2026-07-28, Streamable HTTP, standard request headers). */
const NAME_SOURCE: Readonly<Record<string, string>> = {
  'tools/call': 'name',
  'prompts/get': 'name',
  'resources/read': 'uri',
};

/** A header value as 2026-07-28 carries it: plain when safe, else `=?base64?…?=` of its UTF-8. */
export function headerValue(value: string): string {
  const plain =
    /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/.test(value) &&
    !(value.startsWith('=?base64?') && value.endsWith('?='));
  return plain ? value : `=?base64?${Buffer.from(value, 'utf8').toString('base64')}?=`;
}

/**
 * A 2026-07-28 request: `params._meta` holds the envelope (beside any `_meta` of the caller's, such
 * as an x402 payment), and the headers mirror its version, method and, where the method has one, name.
 */
export function modernRequest(
  id: number | string,
  method: string,
  params: Record<string, unknown> = {},
  version: string = MODERN_PROTOCOL_VERSION,
): { message: Record<string, unknown>; headers: Record<string, string> } {
  const own = params._meta;
  const meta = {
    ...modernEnvelope(version),
    ...(typeof own === 'object' && own !== null ? (own as Record<string, unknown>) : {}),
  };
  const source = Object.hasOwn(NAME_SOURCE, method) ? NAME_SOURCE[method] : undefined;
  const name = source === undefined ? undefined : params[source];
  return {
    message: { jsonrpc: '2.0', id, method, params: { ...params, _meta: meta } },
    headers: {
      'mcp-protocol-version': version,
      'mcp-method': method,
      ...(typeof name === 'string' ? { 'mcp-name': headerValue(name) } : {}),
    },
  };
}

/** Posts one 2026-07-28 request; `headers` are added to (or, as '', remove) the standard ones. */
export async function postModern(
  context: { http: HttpClient },
  path: string,
  method: string,
  params: Record<string, unknown> = {},
  options: { id?: number | string; version?: string; headers?: Record<string, string> } = {},
): Promise<McpReply> {
  const { message, headers } = modernRequest(options.id ?? 1, method, params, options.version);
  const merged = Object.fromEntries(
    Object.entries({ ...headers, ...options.headers }).filter(([, value]) => value !== ''),
  );
  return postMcp(context, path, message, merged);
}

/** A reply as a reason names it: its status and JSON-RPC error, or the start of its body. */
export function describeReply(reply: McpReply): string {
  const { status, text } = reply.response;
  const error = jsonRpcErrorSchema.safeParse(reply.message);
  if (error.success)
    return `HTTP ${status} with JSON-RPC error ${error.data.error.code} (${error.data.error.message})`;
  if (jsonRpcResultSchema.safeParse(reply.message).success) return `HTTP ${status} with a result`;
  return `HTTP ${status}${text === '' ? '' : `: ${excerpt(text.replace(/\s+/g, ' '), 160)}`}`;
}

/**
 * Why the gateway does not serve MCP 2026-07-28 at POST /mcp, or undefined when it does: it answers
 * server/discover with a result, or tools/list with a result that carries a `resultType`. The gateway
 * spec names no protocol revision, so a gateway that speaks only 2025-11-25 conforms; one that
 * answers either way speaks 2026-07-28 and is held to all of it.
 */
export async function modernAbsence(http: HttpClient): Promise<string | undefined> {
  const context = { http };
  const discover = await postModern(context, '/mcp', 'server/discover');
  if (jsonRpcResultSchema.safeParse(discover.message).success) return undefined;
  const list = await postModern(context, '/mcp', 'tools/list');
  const listed = jsonRpcResultSchema.safeParse(list.message);
  if (listed.success && 'resultType' in listed.data.result) return undefined;
  return (
    `the gateway does not serve MCP ${MODERN_PROTOCOL_VERSION} (the gateway spec names no revision): ` +
    `server/discover with the ${MODERN_PROTOCOL_VERSION} _meta envelope answered ${describeReply(discover)}, ` +
    `and tools/list ${listed.success ? 'a result without resultType' : describeReply(list)}`
  );
}

/** A 2026-07-28 result: a JSON-RPC result whose `resultType` says it is complete. */
export function expectCompleteResult(reply: McpReply, what: string): Record<string, unknown> {
  const result = expectResult(reply, what);
  ensure(
    'resultType' in result,
    `${what}: the result has no resultType; every result at MCP ${MODERN_PROTOCOL_VERSION} carries one ("complete" here)`,
  );
  ensure(
    result.resultType === 'complete',
    `${what}: resultType is ${JSON.stringify(result.resultType)}, expected "complete"`,
  );
  return result;
}

export function expectResult(reply: McpReply, what: string): Record<string, unknown> {
  const { response } = reply;
  if (reply.message === undefined) {
    failWith(
      `${what}: expected a JSON-RPC result, got HTTP ${response.status} without a JSON-RPC message` +
        (response.text === '' ? '' : `: ${excerpt(response.text.replace(/\s+/g, ' '), 200)}`),
    );
  }
  const error = jsonRpcErrorSchema.safeParse(reply.message);
  if (error.success) {
    failWith(`${what}: JSON-RPC error ${error.data.error.code} (${error.data.error.message})`);
  }
  ensure(response.status === 200, `${what}: a result came with HTTP ${response.status}, expected 200`);
  return expectShape(jsonRpcResultSchema, reply.message, `${what}: the reply is not a JSON-RPC result`)
    .result;
}

/** The text parts of a tool result, joined: what a model would read. */
export function textOf(result: CallToolResult): string {
  return result.content
    .map((part) => (part.type === 'text' && typeof part.text === 'string' ? part.text : ''))
    .join('\n');
}

/** An X-MCP-Session id nobody else uses. */
export const freshSessionId = (): string => `conformance-${randomBytes(8).toString('hex')}`;

/**
 * Arguments that satisfy a tool's input schema with the least: each required property gets the
 * simplest value of its type. Enough for a side-effect-free smoke tool such as an echo.
 */
export function sampleArguments(schema: Record<string, unknown>): Record<string, unknown> {
  const value = sampleValue(schema, 0);
  return typeof value === 'object' && value !== null && !Array.isArray(value)
    ? (value as Record<string, unknown>)
    : {};
}

function sampleValue(schema: unknown, depth: number): unknown {
  if (typeof schema !== 'object' || schema === null || depth > 8) return null;
  const s = schema as Record<string, unknown>;
  if ('const' in s) return s.const;
  if (Array.isArray(s.enum) && s.enum.length > 0) return s.enum[0];
  if ('default' in s) return s.default;
  for (const key of ['anyOf', 'oneOf', 'allOf'] as const) {
    const options = s[key];
    if (Array.isArray(options) && options.length > 0) return sampleValue(options[0], depth + 1);
  }
  const type = Array.isArray(s.type) ? (s.type.find((t) => t !== 'null') as unknown) : s.type;
  switch (type) {
    case 'string': {
      const min = typeof s.minLength === 'number' ? s.minLength : 0;
      const text = 'sigil conformance';
      return text.length >= min ? text : text.padEnd(min, '.');
    }
    case 'integer':
    case 'number':
      return typeof s.minimum === 'number' ? s.minimum : 1;
    case 'boolean':
      return false;
    case 'array': {
      const min = typeof s.minItems === 'number' ? s.minItems : 0;
      return Array.from({ length: min }, () => sampleValue(s.items, depth + 1));
    }
    case 'null':
      return null;
    default: {
      const properties = (s.properties ?? {}) as Record<string, unknown>;
      const required = Array.isArray(s.required) ? (s.required as string[]) : [];
      return Object.fromEntries(required.map((name) => [name, sampleValue(properties[name], depth + 1)]));
    }
  }
}
