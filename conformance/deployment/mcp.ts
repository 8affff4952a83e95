import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import { ensure, excerpt, expectShape, failWith, notApplicableBecause } from '@sigil/plugin-api/kit';
import type { HttpResponse } from '../http.ts';
import { MCP_PAYMENT_META_KEY } from '../x402.ts';
import type { DeploymentContext } from './context.ts';
import { requiredOfMcp, type Payment } from './payer.ts';

/**
 * A minimal MCP client over Streamable HTTP, written for the runner instead of taken from an SDK so
 * that every exchange goes through `context.http` (recorded, redacted) and a check sees exactly what
 * the gateway answered: the HTTP status, malformed replies, JSON-RPC errors.
 */

/** Protocol revisions this runner speaks; it asks for the first and accepts any of them back. */
export const KNOWN_PROTOCOL_VERSIONS = ['2025-06-18', '2025-11-25', '2025-03-26', '2024-11-05'] as const;
export const REQUESTED_PROTOCOL_VERSION = KNOWN_PROTOCOL_VERSIONS[0];

/** Streamable HTTP: a client accepts both a JSON answer and an event stream. */
const ACCEPT = 'application/json, text/event-stream';

const requestId = z.union([z.string(), z.number()]);

export const jsonRpcErrorSchema = z.object({
  jsonrpc: z.literal('2.0'),
  id: requestId.nullable(),
  error: z.object({ code: z.number().int(), message: z.string(), data: z.unknown().optional() }),
});
export type JsonRpcErrorReply = z.infer<typeof jsonRpcErrorSchema>;

const jsonRpcResultSchema = z.object({
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

export const callToolResultSchema = z.object({
  content: z.array(z.object({ type: z.string() }).loose()),
  isError: z.boolean().optional(),
});
export type CallToolResult = z.infer<typeof callToolResultSchema>;

/** Posts one JSON-RPC message (an object, or raw text to send malformed JSON) to an MCP path. */
export async function postMcp(
  context: DeploymentContext,
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

/** One MCP client connection to a path: the handshake done, its headers carried on every request. */
export class McpConnection {
  private nextId = 1;

  private constructor(
    readonly context: DeploymentContext,
    readonly path: string,
    private readonly headers: Record<string, string>,
    /** What the gateway answered to initialize. */
    readonly initialized: Record<string, unknown>,
  ) {}

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
    return postMcp(
      this.context,
      this.path,
      { jsonrpc: '2.0', id, method, ...(params === undefined ? {} : { params }) },
      this.headers,
      timeoutMs,
    );
  }

  /** Sends a request that must succeed; returns its result. */
  async request(
    method: string,
    params?: Record<string, unknown>,
    timeoutMs?: number,
  ): Promise<Record<string, unknown>> {
    return expectResult(await this.send(method, params, timeoutMs), `${method} at POST ${this.path}`);
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
    const result = expectResult(reply, `tools/call ${name} at POST ${this.path}`);
    return expectShape(
      callToolResultSchema,
      result,
      `tools/call ${name}: the result is not a CallToolResult`,
    );
  }
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
