import Router from '@koa/router';
import type { Context } from 'koa';
import { z } from 'zod';
import { requireAuth, type AuthPrincipal } from '../../../core/auth/index.ts';
import { SigilError } from '@sigil/plugin-api';
import { parseInput } from '../../../core/http/validate.ts';
import type { Payments } from './payments.ts';
import { PAYMENT_RESPONSE_META_KEY, type PaymentReceipt } from './receipts.ts';
import { x402Http } from './x402-http.ts';

/** The x402 v2 payment a REST client sent in PAYMENT-SIGNATURE (base64 JSON), if any. */
export async function paymentFromHeaders(ctx: Context): Promise<unknown> {
  const header = ctx.get('payment-signature');
  if (header === '') return undefined;
  const { decodePaymentSignatureHeader } = await x402Http();
  try {
    return decodePaymentSignatureHeader(header);
  } catch {
    throw new SigilError('invalid_request', 'PAYMENT-SIGNATURE is not base64-encoded JSON', {
      hint: 'Send the x402 v2 PaymentPayload, JSON then base64',
    });
  }
}

/** Puts a receipt in PAYMENT-RESPONSE, as x402's HTTP transport has it. */
export async function setPaymentResponse(ctx: Context, receipt: PaymentReceipt | undefined): Promise<void> {
  if (!receipt) return;
  const { encodePaymentResponseHeader } = await x402Http();
  ctx.set('PAYMENT-RESPONSE', encodePaymentResponseHeader(receipt as never));
}

export const receiptOf = (meta: Record<string, unknown> | undefined): PaymentReceipt | undefined =>
  meta?.[PAYMENT_RESPONSE_META_KEY] as PaymentReceipt | undefined;

/**
 * A rail's payment id: x402-evm's `<network>:<token>:<payer>:<nonce>` is about 165 characters of
 * letters, digits and colons; other rails' ids keep to the same characters and length.
 */
export const paidResultParams = z.object({
  paymentId: z
    .string()
    .min(1)
    .max(256)
    .regex(/^[A-Za-z0-9][A-Za-z0-9:._-]*$/, 'a payment id holds letters, digits and : . _ - only'),
});

/**
 * `GET /api/payments/config` (free), the operator's reconciliation report, and a paid result fetched
 * again by its payer.
 */
export function paymentsRouter(payments: Payments | undefined): Router {
  const router = new Router();
  router.get('/api/payments/config', (ctx) => {
    if (!payments) {
      ctx.body = { enabled: false, message: 'No payment rail is configured: tool calls are free' };
      return;
    }
    const terms = payments.terms();
    ctx.body = {
      enabled: true,
      x402Version: 2,
      scheme: terms.scheme,
      network: terms.network,
      chainId: terms.chainId,
      token: terms.asset,
      pricePerCall: terms.pricePerCall.toString(),
      priceUsd: baseUnitsToDecimal(terms.pricePerCall, terms.asset.decimals),
      payTo: terms.payTo,
      maxTimeoutSeconds: terms.maxTimeoutSeconds,
      facilitator: terms.facilitator,
    };
  });
  router.get('/api/payments/reconciliation', async (ctx) => {
    const auth = ctx.state.auth as AuthPrincipal | undefined;
    if (!auth?.operator) throw new SigilError('forbidden', 'Only operator wallets may reconcile payments');
    if (!payments) throw new SigilError('not_found', 'No payment rail is configured');
    ctx.body = await payments.reconcile();
  });
  // The payer proves itself with its wallet (the key that signed the payment signs in too): the
  // signed payment is no proof, its signature is public on chain once settled. The id is the rail's
  // (x402-evm: `<network>:<token>:<payer>:<nonce>`, lower case), which the payer can form itself.
  router.get('/api/payments/:paymentId/result', requireAuth(), async (ctx) => {
    const { paymentId } = parseInput(paidResultParams, ctx.params, 'params');
    if (!payments) throw new SigilError('not_found', 'No payment rail is configured');
    const auth = ctx.state.auth as AuthPrincipal;
    const { result, receipt } = await payments.paidResult(paymentId, auth.address);
    await setPaymentResponse(ctx, receipt);
    ctx.body = { paymentId, result, receipt };
  });
  return router;
}

/** 500 base units at 6 decimals → "0.0005": exact, no floats. */
export function baseUnitsToDecimal(units: bigint, decimals: number): string {
  const text = units.toString().padStart(decimals + 1, '0');
  const whole = text.slice(0, text.length - decimals);
  const fraction = text.slice(text.length - decimals).replace(/0+$/, '');
  return fraction === '' ? whole : `${whole}.${fraction}`;
}
