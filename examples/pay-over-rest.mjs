// Pays for one tool call over the gateway's REST API with x402, then verifies its execution proof.
//   node examples/pay-over-rest.mjs [gateway URL, default http://127.0.0.1:8402]
// `@x402/fetch` answers the 402: it signs the terms of PAYMENT-REQUIRED with the dev wallet and sends
// the call again with PAYMENT-SIGNATURE; the receipt comes back in PAYMENT-RESPONSE.
import { decodePaymentResponseHeader, wrapFetchWithPayment } from '@x402/fetch';
import { call, gatewayUrl, paymentTerms, textOf, verifyProof, x402Payer } from './x402-payer.mjs';

const payer = x402Payer(await paymentTerms());
const payingFetch = wrapFetchWithPayment(fetch, payer);

const response = await payingFetch(`${gatewayUrl}/api/servers/${call.serverId}/tools/${call.tool}`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ arguments: call.arguments }),
});
const result = await response.json();
if (!response.ok) throw new Error(`the tool call answered ${response.status}: ${JSON.stringify(result)}`);
console.log(`result    ${textOf(result)}`);
const receipt = response.headers.get('payment-response');
if (receipt) {
  const settled = decodePaymentResponseHeader(receipt);
  console.log(`paid      by ${settled.payer} on ${settled.network}, transaction ${settled.transaction}`);
}
await verifyProof(payer, result);
