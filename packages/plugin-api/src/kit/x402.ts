import { z } from 'zod';

/**
 * The x402 v2 objects a payment rail hands out (github.com/x402-foundation/x402,
 * `specs/x402-specification-v2.md`), written here in zod so that a reason names the field that is
 * wrong. Amounts are strings of integer base units.
 */

/** CAIP-2, e.g. `eip155:8453`. */
export const caip2 = z.string().regex(/^[-a-z0-9]{3,8}:[-_a-zA-Z0-9]{1,32}$/, 'a CAIP-2 network id');
const baseUnits = z.string().regex(/^(0|[1-9]\d*)$/, 'an integer number of base units, as a string');

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

/** EVM addresses compare without their checksum case. */
export const sameAddress = (a: string, b: string): boolean => a.toLowerCase() === b.toLowerCase();
