import type { CallToolResult, McpError } from '@modelcontextprotocol/sdk/types.js';
import { SigilError, type Redactor } from '@sigil/plugin-api';
import type { InputRequired } from '../../core/mcp/call-tool.ts';
import { isPlainObject } from './mcp/jsonrpc.ts';
import type { RequestStates, StateOwner } from './request-state.ts';
import { cleanValue, MAX_RESULT_DEPTH, TOO_DEEP, toolError } from './tool-results.ts';

/**
 * A modern server's `input_required` as its 2026-07-28 client receives it (MCP 2026-07-28,
 * "Multi-round requests"): the embedded requests cleaned as results are (the server's secrets
 * redacted), and the gateway's own sealed `requestState` in place of the server's (request-state.ts),
 * which the client echoes with its retry. One nested too deep is a tool error, as a result would be.
 */
export async function relayInputRequired(
  call: StateOwner,
  answer: InputRequired,
  redactor: Redactor,
  states: RequestStates,
): Promise<InputRequired | CallToolResult> {
  const inputRequests =
    answer.inputRequests === undefined ? undefined : cleanValue(answer.inputRequests, redactor);
  if (inputRequests === TOO_DEEP) {
    return toolError(`Tool "${call.tool}" asked for input nested deeper than ${MAX_RESULT_DEPTH} levels`);
  }
  return {
    resultType: 'input_required',
    ...(inputRequests !== undefined && { inputRequests }),
    // Always one, even when the server kept none: the retry is then known to be this call's.
    requestState: await states.seal(call, answer.requestState),
  };
}

/**
 * A modern server's -32021 (MISSING_CLIENT_CAPABILITY_CODE) to a call of a 2026-07-28 client: the
 * same error from the gateway, `capability_required`, its `requiredCapabilities` as the server named
 * them (cleaned as results are: the server's secrets redacted). The tool did not run. What the
 * server sent beside them, its message included, stays here: only the capabilities are the client's
 * to act on. A server that named none (or nested them past the limit) is relayed without them.
 */
export function capabilityRequired(
  call: { serverId: string; tool: string },
  error: McpError,
  redactor: Redactor,
): SigilError {
  const named = (error.data as { requiredCapabilities?: unknown } | undefined)?.requiredCapabilities;
  const cleaned = isPlainObject(named) ? cleanValue(named, redactor) : undefined;
  const requiredCapabilities = cleaned === TOO_DEEP ? undefined : cleaned;
  const names =
    requiredCapabilities === undefined ? '' : ` (${Object.keys(requiredCapabilities).join(', ')})`;
  return new SigilError(
    'capability_required',
    `Tool "${call.tool}" needs a client capability${names} that the request did not declare`,
    {
      details: {
        serverId: call.serverId,
        tool: call.tool,
        ...(requiredCapabilities !== undefined && { requiredCapabilities }),
      },
    },
  );
}

/**
 * A modern server's `input_required` for a caller it cannot be relayed to (an MCP 2025-11-25 client,
 * or REST): a tool error naming what the server asked, so the model or its user knows why the tool
 * did not run. (Such a caller is told of no capability, so a server asking by the book answers -32021
 * instead, which stays a tool error for it.)
 */
export function inputNotRelayed(tool: string, { inputRequests }: InputRequired): CallToolResult {
  const asked = Object.entries(inputRequests ?? {}).map(([key, request]) => `${request.method} (${key})`);
  return toolError(
    `Tool "${tool}" needs input before it can run${asked.length > 0 ? `: ${asked.join(', ')}` : ''}. ` +
      'Only an MCP 2026-07-28 client can give it: call the tool with one.',
  );
}
