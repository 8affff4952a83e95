/** What the gateway spec says of payments, quoted by the checks, and the numbers it fixes. */

export const SPEC_COST =
  'gateway spec part 4, REST endpoints: POST /api/servers/:id/tools/:name and POST /api/verify cost "x402", the others are "free"; tools/call: "x402 payment required for non-meta tools"; part 5: "Tool payments use x402"';
export const SPEC_PRICE =
  'gateway spec part 2, payment configuration: "network: layer-2 mainnet with chain ID 8453 … price 0.0005 USD per tool call"; part 8: "Price per tool call: 0.0005 USD"';
export const SPEC_FLOW =
  'gateway spec part 1: "Verifies a payment proof before execution and settles after success only"; part 3: payment verified → settled, "on-chain settlement after execution"';
export const SPEC_NO_CHARGE =
  'gateway spec part 3: "payment verified | execution fails | not settled | no charge"; part 7: "Failed tool calls are not settled (no charge)"';

/** The spec's network and price. */
export const SPEC_NETWORK = 'eip155:8453';
export const SPEC_CHAIN_ID = 8453;
export const SPEC_PRICE_USD = '0.0005';
export const CONFIG = '/api/payments/config';
export const VERIFY = '/api/verify';
