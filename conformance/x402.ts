import { z } from 'zod';

/**
 * x402 v2 wire objects as the conformance checks read them (github.com/x402-foundation/x402,
 * `specs/x402-specification-v2.md` and `specs/transports-v2/`), written here in zod so that a
 * reason names the field that is wrong. Amounts are strings of integer base units.
 */

/** CAIP-2, e.g. `eip155:8453`. */
export const caip2 = z.string().regex(/^[-a-z0-9]{3,8}:[-_a-zA-Z0-9]{1,32}$/, 'a CAIP-2 network id');
export const baseUnits = z.string().regex(/^(0|[1-9]\d*)$/, 'an integer number of base units, as a string');

export const x402RequirementsSchema = z
  .object({
    scheme: z.string().min(1),
    network: caip2,
    amount: baseUnits,
    asset: z.string().min(1),
    payTo: z.string().min(1),
    maxTimeoutSeconds: z.number().int().positive(),
    extra: z.record(z.string(), z.unknown()).optional(),
  })
  .loose();
export type X402Requirements = z.infer<typeof x402RequirementsSchema>;

export const x402PaymentRequiredSchema = z
  .object({
    x402Version: z.literal(2),
    error: z.string().optional(),
    resource: z.object({ url: z.string().min(1) }).loose(),
    accepts: z.array(x402RequirementsSchema).min(1),
  })
  .loose();
export type X402PaymentRequiredWire = z.infer<typeof x402PaymentRequiredSchema>;

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

/** EVM addresses compare without their checksum case. */
export const sameAddress = (a: string, b: string): boolean => a.toLowerCase() === b.toLowerCase();

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
