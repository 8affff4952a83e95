import { z } from 'zod';
import { caip2 } from '@sigil/plugin-api/kit';

/**
 * x402 v2 as the deployment checks see it on the wire (github.com/x402-foundation/x402,
 * `specs/x402-specification-v2.md` and `specs/transports-v2/`): the settlement, the transports'
 * headers and MCP keys, and prices. The objects a payment rail hands out are in the plugin API's kit
 * (`x402PaymentRequiredSchema`…), shared with the payment-rail kit.
 */

/** `SettleResponse`, what PAYMENT-RESPONSE and `_meta["x402/payment-response"]` carry. */
export const x402SettleResponseSchema = z
  .object({
    success: z.boolean(),
    transaction: z.string(),
    network: caip2,
    payer: z.string().optional(),
    errorReason: z.string().optional(),
  })
  .loose();

/** Where x402's MCP transport carries a payment in `params._meta`, and the settlement in `result._meta`. */
export const MCP_PAYMENT_META_KEY = 'x402/payment';
export const MCP_PAYMENT_RESPONSE_META_KEY = 'x402/payment-response';

/** x402's HTTP transport headers (base64 of UTF-8 JSON). */
export const HEADER = {
  required: 'payment-required',
  signature: 'payment-signature',
  response: 'payment-response',
} as const;

/** The JSON inside a base64 x402 header, or undefined when it is not base64 JSON. */
export function decodeHeader(value: string | null): unknown {
  if (value === null || value === '') return undefined;
  try {
    return JSON.parse(Buffer.from(value, 'base64').toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}

export const encodeHeader = (value: unknown): string =>
  Buffer.from(JSON.stringify(value), 'utf8').toString('base64');

/** The spec's price, 0.0005 USD, in base units of a token with `decimals` decimals (at least 4). */
export function specPriceUnits(decimals: number): bigint | undefined {
  if (!Number.isInteger(decimals) || decimals < 4) return undefined;
  return 5n * 10n ** BigInt(decimals - 4);
}

/** `units` base units at `decimals` decimals as an exact decimal string: 500 at 6 → "0.0005". */
export function formatUnits(units: bigint, decimals: number): string {
  const negative = units < 0n;
  const text = (negative ? -units : units).toString().padStart(decimals + 1, '0');
  const whole = text.slice(0, text.length - decimals);
  const fraction = text.slice(text.length - decimals).replace(/0+$/, '');
  return `${negative ? '-' : ''}${whole}${fraction === '' ? '' : `.${fraction}`}`;
}
