// Pays for one tool call over MCP with x402, using the official MCP SDK client, then verifies its
// execution proof.
//   node examples/pay-over-mcp.mjs [gateway URL, default http://127.0.0.1:8402]
// x402's MCP transport: an unpaid call fails with JSON-RPC error 402 whose `data` holds the terms
// (x402's PaymentRequired); the client signs them and calls again with the payment in
// `params._meta["x402/payment"]`; the receipt comes back in `result._meta["x402/payment-response"]`.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { call, gatewayUrl, paymentTerms, textOf, verifyProof, x402Payer } from './x402-payer.mjs';

const PAYMENT_REQUIRED = 402;
const payer = x402Payer(await paymentTerms());

// One server's tools, un-namespaced, for anonymous clients.
const client = new Client({ name: 'sigil-pay-over-mcp', version: '1.0.0' });
await client.connect(new StreamableHTTPClientTransport(new URL(`${gatewayUrl}/mcp/server/${call.serverId}`)));
const request = { name: call.tool, arguments: call.arguments };
let result;
try {
  result = await client.callTool(request);
} catch (error) {
  if (!(error instanceof McpError) || error.code !== PAYMENT_REQUIRED) throw error;
  const payment = await payer.createPaymentPayload(error.data);
  result = await client.callTool({ ...request, _meta: { 'x402/payment': payment } });
}
await client.close();
if (result.isError) throw new Error(`the tool failed: ${textOf(result)}`);
console.log(`result    ${textOf(result)}`);
const settled = result._meta?.['x402/payment-response'];
if (settled)
  console.log(`paid      by ${settled.payer} on ${settled.network}, transaction ${settled.transaction}`);
await verifyProof(payer, result);
