import canonicalize from 'canonicalize';
import {
  ensure,
  excerpt,
  expectShape,
  failWith,
  notApplicableBecause,
  x402PaymentRequiredSchema,
  type X402PaymentRequiredWire,
} from '@sigil/plugin-api/kit';
import type { HttpRequest, HttpResponse } from '../../http.ts';
import { decodeHeader, HEADER, x402SettleResponseSchema } from '../../x402.ts';
import { path } from '../catalog.ts';
import type { DeploymentContext } from '../context.ts';
import {
  CALL_TIMEOUT_MS,
  callToolResultSchema,
  describeReply,
  McpConnection,
  type McpReply,
  type McpTool,
} from '../mcp.ts';
import { locateMcpPaymentRequired, type McpPaymentRequired } from '../payer.ts';

/**
 * The calls the payment checks make and how they read the answers: payment requests (x402 v2 HTTP
 * and MCP transports), receipts, failures.
 */

export type Json = Record<string, unknown>;

/** The x402 v2 PaymentRequired of an unpaid HTTP answer, checked: 402, PAYMENT-REQUIRED, each field. */
export function expectPaymentRequired(response: HttpResponse, what: string): X402PaymentRequiredWire {
  if (response.status !== 402) {
    failWith(
      response.status >= 200 && response.status < 300
        ? `${what} without a payment answered HTTP ${response.status}: the deployment charges nothing for it, and the gateway spec makes it an x402 endpoint`
        : `${what} without a payment: expected HTTP 402, got ${response.status}: ${excerpt(response.text.replace(/\s+/g, ' '), 200)}`,
    );
  }
  const header = response.headers.get(HEADER.required);
  ensure(
    header !== null && header !== '',
    `${what} answered 402 without a PAYMENT-REQUIRED header (x402 v2 HTTP transport)`,
  );
  const decoded = decodeHeader(header);
  ensure(decoded !== undefined, `${what}: PAYMENT-REQUIRED is not base64-encoded JSON`);
  const required = expectShape(
    x402PaymentRequiredSchema,
    decoded,
    `${what}: PAYMENT-REQUIRED is not an x402 v2 PaymentRequired`,
  );
  expectEvmAddresses(required, `${what}: PAYMENT-REQUIRED`);
  return required;
}

/** On an EVM network an asset and a payee are 20-byte addresses. */
export function expectEvmAddresses(required: X402PaymentRequiredWire, what: string): void {
  for (const entry of required.accepts) {
    if (!entry.network.startsWith('eip155:')) continue;
    for (const field of ['asset', 'payTo'] as const) {
      ensure(
        /^0x[0-9a-fA-F]{40}$/.test(entry[field]),
        `${what}: ${field} "${entry[field]}" on ${entry.network} is not an address`,
      );
    }
  }
}

export const restCall = (serverId: string, tool: McpTool, args: Json): HttpRequest => ({
  service: 'gateway',
  method: 'POST',
  path: path.tool(serverId, tool.name),
  json: { arguments: args },
  timeoutMs: CALL_TIMEOUT_MS,
});

export const perServer = (serverId: string) => `/mcp/server/${encodeURIComponent(serverId)}`;

/** A payment request inside an MCP reply and where it is, or a failure that says what came instead. */
export function expectMcpPaymentRequired(reply: McpReply, what: string): McpPaymentRequired {
  ensure(reply.response.status < 500, `${what}: HTTP ${reply.response.status}, a server error`);
  const located = locateMcpPaymentRequired(reply);
  if (located) {
    expectEvmAddresses(located.required, what);
    return located;
  }
  const result = callToolResultSchema.safeParse((reply.message as { result?: unknown } | undefined)?.result);
  if (result.success && result.data.isError !== true) {
    failWith(
      `${what} without a payment ran and answered a result: the gateway spec requires an x402 payment for tools/call of a non-meta tool`,
    );
  }
  failWith(
    `${what} without a payment answered ${excerpt(JSON.stringify(reply.message ?? reply.response.text), 200)}, with no x402 v2 PaymentRequired (a tool result with isError and structuredContent, or a JSON-RPC error's data)`,
  );
}

/**
 * The payment request of an unpaid tools/call at 2025-11-25, what another revision must answer
 * alike; when the call asks for none, the check is not applicable (GW-4.x402-mcp-payment-required
 * judges that).
 */
export async function legacyPaymentRequired(
  context: DeploymentContext,
  path: string,
  tool: McpTool,
  args: Json,
): Promise<McpPaymentRequired> {
  const connection = await McpConnection.open(context, path);
  const reply = await connection.send('tools/call', { name: tool.name, arguments: args }, CALL_TIMEOUT_MS);
  const located = locateMcpPaymentRequired(reply);
  if (!located) {
    notApplicableBecause(
      `tools/call ${tool.name} at POST ${path} without a payment, at 2025-11-25, asked for no x402 payment (${describeReply(reply)}): there is nothing to answer alike at another revision (GW-4.x402-mcp-payment-required judges that)`,
    );
  }
  return located;
}

/** The terms a payer signs: the same at every revision, or one revision's clients pay otherwise. */
const termsOf = ({ required }: McpPaymentRequired) =>
  canonicalize({
    x402Version: required.x402Version,
    error: required.error,
    resource: required.resource.url,
    accepts: required.accepts,
  });

/** A payment request at another revision, checked against `baseline`: in the same place, the same terms. */
export function expectSamePaymentRequired(
  baseline: McpPaymentRequired,
  other: McpPaymentRequired,
  what: string,
): void {
  ensure(
    other.place === baseline.place,
    `${what} carries its PaymentRequired in ${other.place}; at 2025-11-25 the same call carries it in ${baseline.place}, where x402 MCP clients look for it`,
  );
  ensure(
    termsOf(other) === termsOf(baseline),
    `${what} asks ${excerpt(termsOf(other) ?? '', 300)}; at 2025-11-25 the same call asks ${excerpt(termsOf(baseline) ?? '', 300)}`,
  );
}

/** A paid answer's receipt: PAYMENT-RESPONSE (REST) or `_meta["x402/payment-response"]` (MCP). */
export function expectReceipt(receipt: unknown, what: string, where: string): void {
  ensure(
    receipt !== undefined,
    `${what} succeeded without ${where} (x402: a paid response carries the settlement)`,
  );
  const parsed = expectShape(
    x402SettleResponseSchema,
    receipt,
    `${what}: ${where} is not an x402 SettleResponse`,
  );
  ensure(parsed.success, `${what}: ${where} says success false (${parsed.errorReason ?? 'no reason'})`);
}

/** True for an answer that is a failure: a tool error, a JSON-RPC error, a 4xx or 5xx (but 402). */
export function failed(response: HttpResponse, message: unknown): boolean {
  if (message !== undefined) {
    const reply = message as { error?: unknown; result?: { isError?: unknown } };
    return reply.error !== undefined || reply.result?.isError === true;
  }
  if (response.status >= 400) return true;
  return (response.body as { isError?: unknown } | undefined)?.isError === true;
}
