import {
  type PaymentRailV1,
  type PaymentResource,
  type PaymentTerms,
  SigilError,
  type VerifiedPayment,
  type X402PaymentRequired,
} from '@sigil/plugin-api';
import { PAID_RESULT_EXTENSION, SETTLEMENT_UNPROVEN } from './receipts.ts';
import { x402Http } from './x402-http.ts';

/** How any x402 client pays, over either transport. */
const HOW_TO_PAY =
  'Pay with x402: sign one of the terms in `accepts` (REST: the PAYMENT-REQUIRED header; MCP: the error data) and send the payment in the PAYMENT-SIGNATURE header (REST) or params._meta["x402/payment"] (MCP)';

/**
 * The 402s of the payment path: each carries x402's PAYMENT-REQUIRED, `details.reason` its stable
 * code (`payment_required` when nothing was paid; the same as the PaymentRequired's `error`), and a
 * message of one sentence a payer can act on.
 */
export class Refusals {
  constructor(
    private readonly deps: {
      rail: PaymentRailV1;
      /** Added to the hint of a payment asked for: how to pay here (`gateway.paymentHint`). */
      hint?: string;
    },
  ) {}

  /** The refusal of an unpaid or badly paid call. */
  paymentRequired(
    resource: PaymentResource,
    reason?: { code: string; message: string },
  ): Promise<SigilError> {
    const code = reason?.code ?? 'payment_required';
    const required = this.deps.rail.paymentRequired(resource, code);
    const message = reason?.message ?? `Payment required: this call costs ${priceOf(this.deps.rail.terms())}`;
    return paymentError(required, message, {
      reason: code,
      hint: this.deps.hint === undefined ? HOW_TO_PAY : `${HOW_TO_PAY}. ${this.deps.hint}`,
    });
  }

  /**
   * The 402 of a call whose authorization the chain shows used, with no proof yet that it paid us
   * (the payer may have cancelled it): the result stays kept, and its payer fetches it once the
   * retry worker proves the settlement.
   */
  unproven(payment: VerifiedPayment, resource: PaymentResource, kept: boolean): Promise<SigilError> {
    const required = this.deps.rail.paymentRequired(resource, SETTLEMENT_UNPROVEN);
    const resultPath = `/api/payments/${encodeURIComponent(payment.id)}/result`;
    const extension = { paymentId: payment.id, kept, ...(kept ? { resultPath } : {}) };
    return paymentError(
      { ...required, extensions: { [PAID_RESULT_EXTENSION]: extension } },
      'Payment not proven yet: the authorization is used on chain, but nothing shows yet that it paid for this call; the result is withheld',
      {
        reason: SETTLEMENT_UNPROVEN,
        hint: kept
          ? `Once the settlement is proven, the paying wallet fetches the result at GET ${resultPath} (signed in)`
          : 'The result was not kept (over the size or per-payer limits); nothing is charged unless the settlement is proven',
        paymentId: payment.id,
      },
    );
  }
}

const priceOf = (terms: PaymentTerms): string =>
  `${terms.pricePerCall} base units of ${terms.asset.name} on ${terms.network}`;

async function paymentError(
  required: X402PaymentRequired,
  message: string,
  refusal: { reason: string; hint: string; paymentId?: string },
): Promise<SigilError> {
  const { encodePaymentRequiredHeader } = await x402Http();
  return new SigilError('payment_required', message, {
    hint: refusal.hint,
    details: {
      reason: refusal.reason,
      paymentRequired: required,
      ...(refusal.paymentId === undefined ? {} : { paymentId: refusal.paymentId }),
    },
    headers: { 'PAYMENT-REQUIRED': encodePaymentRequiredHeader(required as never) },
  });
}
