/** Where x402's MCP transport carries a payment in `params._meta`, and the settlement in `result._meta`. */
export const PAYMENT_META_KEY = 'x402/payment';
export const PAYMENT_RESPONSE_META_KEY = 'x402/payment-response';

/** x402 v2 `SettleResponse`: what a paid response carries (PAYMENT-RESPONSE, or `_meta`). */
export interface PaymentReceipt {
  success: boolean;
  transaction: string;
  network: string;
  payer: string;
  errorReason?: string;
  /** Says when the result was not kept for its payer to fetch again (`io.sigil/paid-result`). */
  extensions?: Record<string, unknown>;
}

/** A receipt's reason while the settlement is undecided and nothing shows the authorization used. */
export const SETTLEMENT_PENDING = 'settlement_pending';
/** The reason of a 402 whose authorization is used on chain, not yet proven to have paid us. */
export const SETTLEMENT_UNPROVEN = 'settlement_unproven';
/** Where a 402's PaymentRequired names the payment whose result is kept (x402 v2 `extensions`). */
export const PAID_RESULT_EXTENSION = 'io.sigil/paid-result';
