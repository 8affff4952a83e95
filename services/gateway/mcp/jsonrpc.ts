import {
  ErrorCode,
  JSONRPCNotificationSchema,
  JSONRPCRequestSchema,
  type JSONRPCNotification,
  type JSONRPCRequest,
} from '@modelcontextprotocol/sdk/types.js';
import type { JsonRpcErrorObject } from '../../../core/http/mcp-errors.ts';

export { ErrorCode };

export type RequestId = string | number;

export type JsonRpcReply =
  | { jsonrpc: '2.0'; id: RequestId; result: Record<string, unknown> }
  | { jsonrpc: '2.0'; id: RequestId | null; error: JsonRpcErrorObject };

export const errorReply = (id: RequestId | null, error: JsonRpcErrorObject): JsonRpcReply => ({
  jsonrpc: '2.0',
  id,
  error: {
    code: error.code,
    message: error.message,
    ...(error.data === undefined ? {} : { data: error.data }),
  },
});

export type IncomingMessage =
  | { kind: 'request'; message: JSONRPCRequest }
  | { kind: 'notification'; message: JSONRPCNotification }
  | { kind: 'invalid'; reply: JsonRpcReply };

/**
 * Sorts one parsed body into a request, a notification, or an Invalid Request reply. Batches are
 * refused: MCP removed JSON-RPC batching in protocol 2025-06-18.
 */
export function classify(body: unknown): IncomingMessage {
  if (Array.isArray(body)) {
    return {
      kind: 'invalid',
      reply: errorReply(null, {
        code: ErrorCode.InvalidRequest,
        message: 'Invalid Request: batches are not supported',
      }),
    };
  }
  const plain = plainRequest(body);
  if (plain) return { kind: 'request', message: plain };
  const request = JSONRPCRequestSchema.safeParse(body);
  if (request.success) return { kind: 'request', message: request.data };
  const notification = JSONRPCNotificationSchema.safeParse(body);
  if (notification.success && !hasId(body)) return { kind: 'notification', message: notification.data };
  const id = idOf(body);
  return {
    kind: 'invalid',
    reply: errorReply(id, {
      code: ErrorCode.InvalidRequest,
      message: 'Invalid Request: not a JSON-RPC 2.0 request or notification',
    }),
  };
}

const REQUEST_MEMBERS = new Set(['jsonrpc', 'id', 'method', 'params']);

/**
 * A well-formed request whose params (if any) are a plain object, with a `_meta` (if any) that
 * {@link plainMeta} accepts, recognized without zod: the SDK schema's parse is a measurable share of a
 * busy gateway's CPU per call, and every 2026-07-28 request has a `_meta`. Anything else is undefined,
 * and the SDK schema decides.
 */
function plainRequest(body: unknown): JSONRPCRequest | undefined {
  if (!isPlainObject(body)) return undefined;
  for (const member in body) if (!REQUEST_MEMBERS.has(member)) return undefined;
  const { jsonrpc, id, method, params } = body;
  if (jsonrpc !== '2.0' || typeof method !== 'string') return undefined;
  if (typeof id !== 'string' && !Number.isSafeInteger(id)) return undefined;
  if (params !== undefined && (!isPlainObject(params) || !plainMeta(params))) return undefined;
  return body as JSONRPCRequest;
}

/** The `_meta` member the SDK 1.x schema checks beyond `progressToken` (left to it when present). */
const RELATED_TASK_META_KEY = 'io.modelcontextprotocol/related-task';

/**
 * Whether `params` has no `_meta`, or one the SDK's request schema would accept as it is: a plain
 * object whose `progressToken` (if any) is a string or an integer, without a related-task member. The
 * 2026-07-28 envelope keys are checked where the revision is decided (revision.ts).
 */
export function plainMeta(params: Record<string, unknown>): boolean {
  if (!('_meta' in params)) return true;
  const meta = params._meta;
  if (!isPlainObject(meta) || RELATED_TASK_META_KEY in meta) return false;
  if (!('progressToken' in meta)) return true;
  const token = meta.progressToken;
  return typeof token === 'string' || Number.isSafeInteger(token);
}

/** An object as JSON.parse makes them (not an array, nor an instance of a class). */
export const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' &&
  value !== null &&
  !Array.isArray(value) &&
  (Object.getPrototypeOf(value) === Object.prototype || Object.getPrototypeOf(value) === null);

const hasId = (body: unknown): boolean => typeof body === 'object' && body !== null && 'id' in body;

function idOf(body: unknown): RequestId | null {
  const id = hasId(body) ? (body as { id: unknown }).id : null;
  return typeof id === 'string' || (typeof id === 'number' && Number.isFinite(id)) ? id : null;
}
