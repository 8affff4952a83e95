import type { Requirement } from '../context.ts';
import { chargeExactRequirement, mcp2026ChargeExactRequirement } from './charge-exact.ts';
import { freeEndpointsRequirement } from './free-endpoints.ts';
import { noChargeOnFailureRequirement } from './no-charge-on-failure.ts';
import { paymentRequiredRequirements } from './payment-required.ts';
import { priceRequirement } from './price.ts';
import { replayRefusedRequirement } from './replay.ts';

/**
 * Payments (gateway spec parts 1 to 4, 7 and 8): tool calls and POST /api/verify cost an x402
 * payment, asked with 402 and PAYMENT-REQUIRED (x402 v2 HTTP transport) or, over MCP, with the
 * PaymentRequired in the reply (x402 MCP transport); every other endpoint and the meta-tools are
 * free; the price is 0.0005 USD on chain 8453; a payment is settled only after a successful call,
 * once. What needs money (a call that must cost exactly the price, a failing call that must cost
 * nothing, a payment presented twice) needs the tester's payer, `--payer-key` and `--rpc-url`.
 */

/** In the order the runner checks them: what asks for a payment, the price, then what a payment moves. */
export const paymentRequirements: readonly Requirement[] = [
  ...paymentRequiredRequirements,
  freeEndpointsRequirement,
  priceRequirement,
  chargeExactRequirement,
  mcp2026ChargeExactRequirement,
  noChargeOnFailureRequirement,
  replayRefusedRequirement,
];
