import { ErrorCode as JsonRpcCode } from '@modelcontextprotocol/sdk/types.js';
import type { ErrorCode, SigilError } from '@sigil/plugin-api';
import { STATUS_BY_CODE } from './errors.ts';

/** x402's MCP transport: an unpaid tool call is this JSON-RPC error (as `@x402/mcp` defines it). */
export const PAYMENT_REQUIRED_CODE = 402;

/**
 * MCP 2026-07-28's MissingRequiredClientCapability: the request needs a capability its client did not
 * declare in `_meta`; `data.requiredCapabilities` names it (a ClientCapabilities object).
 */
export const MISSING_CLIENT_CAPABILITY_CODE = -32021;

/**
 * The gateway's own codes (in JSON-RPC's server-error range) for a call refused for now, beside the
 * HTTP 429 and 503 of the same codes; `data.retryAfterSeconds` says when to try again. For MCP
 * 2025-11-25 and older clients, as they always were.
 */
export const RETRY_LATER_CODES = { rate_limited: -32029, unavailable: -32053 } as const;

/**
 * The same refusals for MCP 2026-07-28 clients: that revision reserves -32020…-32099 for the spec's
 * own codes, so these are the HTTP statuses themselves, outside JSON-RPC's ranges (as x402's 402 is).
 */
export const MODERN_RETRY_LATER_CODES = { rate_limited: 429, unavailable: 503 } as const;

/** Which MCP revision a client speaks: 2025-11-25 and older (`legacy`), or 2026-07-28 (`modern`). */
export type McpEra = 'legacy' | 'modern';

/** The `details.reason` of a `not_found` that names a tool which is not there: MCP's "unknown tool". */
export const UNKNOWN_TOOL = 'unknown_tool';

/** A JSON-RPC error object; `data` is shown to the client, so never put secrets in it. */
export interface JsonRpcErrorObject {
  code: number;
  message: string;
  data?: unknown;
}

/** A failure an MCP client is answered with a JSON-RPC error: the call must change, be paid, or wait. */
interface JsonRpcAnswer {
  jsonRpc: number;
  /** The code for a 2026-07-28 client, when it is not `jsonRpc` (which is in the range it reserves). */
  modern?: number;
  /** Which errors of the code are JSON-RPC errors; the others are tool errors. */
  only?: (error: SigilError) => boolean;
  /** `data` is x402's payment terms (and the hint), not the stable code and details. */
  x402?: true;
  /**
   * Over HTTP the answer has the code's own status (STATUS_BY_CODE), as MCP 2026-07-28 asks of
   * -32021; every other error of a handler is in-band, with 200.
   */
  httpStatus?: true;
}

/**
 * How an MCP client sees a `SigilError` that ends its tools/call: a JSON-RPC error (`data` holds the
 * stable code and details), or `tool_error`, a result with `isError` whose text (message and hint) a
 * model reads and acts on: what the gateway refused or could not run. A failure of any other request
 * (tools/list, a per-server endpoint's admission) that is not a JSON-RPC error gets its HTTP status.
 */
export type McpAnswer = JsonRpcAnswer | 'tool_error';

/** The one place where error codes meet MCP answers, beside STATUS_BY_CODE (errors.ts). */
export const MCP_ANSWER_BY_CODE: Record<ErrorCode, McpAnswer> = {
  invalid_request: { jsonRpc: JsonRpcCode.InvalidParams },
  payload_too_large: { jsonRpc: JsonRpcCode.InvalidParams },
  /** An unknown tool is a protocol error (MCP); a server or package not found is the tool's failure. */
  not_found: { jsonRpc: JsonRpcCode.InvalidParams, only: (error) => error.details?.reason === UNKNOWN_TOOL },
  payment_required: { jsonRpc: PAYMENT_REQUIRED_CODE, x402: true },
  /** Only a 2026-07-28 client declares capabilities, so only it is told this (see tool-calls.ts). */
  capability_required: { jsonRpc: MISSING_CLIENT_CAPABILITY_CODE, httpStatus: true },
  rate_limited: { jsonRpc: RETRY_LATER_CODES.rate_limited, modern: MODERN_RETRY_LATER_CODES.rate_limited },
  /** At capacity, with a time to retry; a server that cannot start or install is the tool's failure. */
  unavailable: {
    jsonRpc: RETRY_LATER_CODES.unavailable,
    modern: MODERN_RETRY_LATER_CODES.unavailable,
    only: (error) => typeof error.details?.retryAfterSeconds === 'number',
  },
  unauthorized: 'tool_error',
  forbidden: 'tool_error',
  misdirected_request: 'tool_error',
  method_not_allowed: 'tool_error',
  conflict: 'tool_error',
  proof_invalid: 'tool_error',
  unsupported_media_type: 'tool_error',
  internal: 'tool_error',
  config_invalid: 'tool_error',
  plugin_invalid: 'tool_error',
};

/**
 * The JSON-RPC error `error` is to an MCP client of `era`, or undefined when it is a tool error (the
 * same errors are JSON-RPC errors on both eras; only the retry-later codes differ).
 */
export function jsonRpcErrorOf(error: SigilError, era: McpEra = 'legacy'): JsonRpcErrorObject | undefined {
  const answer = MCP_ANSWER_BY_CODE[error.code];
  if (answer === 'tool_error' || (answer.only && !answer.only(error))) return undefined;
  const code = era === 'modern' ? (answer.modern ?? answer.jsonRpc) : answer.jsonRpc;
  if (answer.x402) {
    // The client reads the terms from `data` and pays in `_meta`. The hint rides beside them (x402
    // clients ignore other members), and in the message, which is all some clients show (the
    // inspector's CLI).
    return {
      code,
      message: withHint(error),
      data: { ...(error.details?.paymentRequired as object), hint: error.hint },
    };
  }
  return { code, message: error.message, data: { code: error.code, ...error.details } };
}

/** The HTTP status of an MCP answer that is `error`'s JSON-RPC error: 200, unless the code has its own. */
export function httpStatusOf(error: SigilError): number {
  const answer = MCP_ANSWER_BY_CODE[error.code];
  return answer !== 'tool_error' && answer.httpStatus ? STATUS_BY_CODE[error.code] : 200;
}

/** What a tool error says of `error`: its message, and its hint when it has one. */
export const withHint = (error: SigilError): string =>
  error.hint ? `${error.message} (${error.hint})` : error.message;
