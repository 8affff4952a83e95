// What both payment examples share: the gateway's address, the dev wallet, an x402 client that pays
// in the gateway's token, and the check of an execution proof with POST /api/verify.
import { x402Client } from '@x402/core/client';
import { ExactEvmScheme } from '@x402/evm/exact/client';
import { wrapFetchWithPayment } from '@x402/fetch';
import { account } from './dev-wallet.mjs';

/** The first argument, else SIGIL_GATEWAY_URL, else where `npm start` serves the gateway. */
export const gatewayUrl = (
  process.argv[2] ??
  process.env.SIGIL_GATEWAY_URL ??
  'http://127.0.0.1:8402'
).replace(/\/+$/, '');

/** The MCP server and tool to call: the `echo` tool of the shipped catalog's `everything` server. */
export const call = {
  serverId: process.env.SIGIL_SERVER ?? 'everything',
  tool: 'echo',
  arguments: { message: process.env.SIGIL_MESSAGE ?? 'hello, paid with x402' },
};

/** The gateway's payment terms (free to read): its network, token and price, or `enabled: false`. */
export async function paymentTerms() {
  const response = await fetch(`${gatewayUrl}/api/payments/config`);
  if (!response.ok)
    throw new Error(`GET /api/payments/config answered ${response.status}: is the gateway at ${gatewayUrl}?`);
  const terms = await response.json();
  console.log(
    terms.enabled
      ? `payments  ${terms.pricePerCall} base units (${terms.priceUsd} USD) of ${terms.token.name} per call on ${terms.network}, from ${account.address}`
      : 'payments  none: this gateway has no payment rail, calls are free',
  );
  return terms;
}

/**
 * An x402 client paying with `account` in the gateway's token. x402's spend controls accept only
 * assets they know (USDC on the main networks) unless told otherwise: the dev token is listed here.
 */
export function x402Payer(terms) {
  const client = new x402Client();
  if (!terms.enabled) return client;
  return client
    .register(terms.network, new ExactEvmScheme(account))
    .setSpendControls({ allowedAssets: [{ network: terms.network, asset: terms.token.address }] });
}

/** Where a tool result carries the gateway's signed execution proof. */
export const PROOF_META_KEY = 'io.sigil/execution-proof';

/**
 * Checks the result's execution proof with POST /api/verify (itself a paid call: the fetch that pays
 * answers its 402), against the request that was made and the result received.
 */
export async function verifyProof(payer, result) {
  const proof = result._meta?.[PROOF_META_KEY];
  if (proof === undefined) throw new Error('the result carries no execution proof');
  console.log(
    `proof     ${proof.id} (server ${proof.server.id}, tool ${proof.tool}, signed ${proof.timestamp})`,
  );
  const response = await wrapFetchWithPayment(fetch, payer)(`${gatewayUrl}/api/verify`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ proof, request: call, response: result }),
  });
  const verdict = await response.json();
  if (!response.ok || verdict.valid !== true)
    throw new Error(`POST /api/verify answered ${response.status}: ${JSON.stringify(verdict)}`);
  console.log(`verified  POST /api/verify: the proof is valid for this request and result`);
}

/** The text of a tool result. */
export const textOf = (result) =>
  result.content.map((part) => (part.type === 'text' ? part.text : `[${part.type}]`)).join('\n');
