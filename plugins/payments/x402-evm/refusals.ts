/**
 * What a payer reads when the facilitator refuses a payment: a stable code and one sentence. x402's
 * own `invalidMessage` is not passed on: for a refused simulation it is the node's revert dumped by
 * viem (contract call, arguments, docs links), which says nothing a payer can act on.
 */

/** The code a payment presented again is refused with, whichever check caught it. */
export const PAYMENT_ALREADY_USED = 'payment_already_used';

/** x402's reasons (`@x402/evm` `Err*`), each as Sigil's code and the sentence a payer reads. */
const REFUSALS: Readonly<Record<string, { code: string; message: string }>> = {
  invalid_exact_evm_nonce_already_used: {
    code: PAYMENT_ALREADY_USED,
    message: 'This payment authorization was already used on chain; sign a new payment for this call',
  },
  invalid_exact_evm_insufficient_balance: {
    code: 'invalid_exact_evm_insufficient_balance',
    message: "The payer's token balance is below the price of this call",
  },
  invalid_exact_evm_signature: {
    code: 'invalid_exact_evm_signature',
    message: "The payment's signature is not the payer's signature of this authorization",
  },
  invalid_exact_evm_payload_authorization_valid_before: {
    code: 'invalid_exact_evm_payload_authorization_valid_before',
    message: 'The payment authorization has expired; sign a new payment',
  },
  invalid_exact_evm_payload_authorization_valid_after: {
    code: 'invalid_exact_evm_payload_authorization_valid_after',
    message: 'The payment authorization is not valid yet',
  },
  invalid_exact_evm_recipient_mismatch: {
    code: 'invalid_exact_evm_recipient_mismatch',
    message: 'The payment is made out to another recipient than the payTo of the terms',
  },
  invalid_exact_evm_authorization_value: {
    code: 'invalid_exact_evm_authorization_value',
    message: 'The payment authorizes another amount than the price of this call',
  },
  invalid_exact_evm_payload_authorization_value_mismatch: {
    code: 'invalid_exact_evm_payload_authorization_value_mismatch',
    message: 'The payment authorizes another amount than the price of this call',
  },
  invalid_exact_evm_token_name_mismatch: {
    code: 'invalid_exact_evm_token_name_mismatch',
    message: "The payment was signed for another token name than the terms' asset",
  },
  invalid_exact_evm_token_version_mismatch: {
    code: 'invalid_exact_evm_token_version_mismatch',
    message: "The payment was signed for another token version than the terms' asset",
  },
  invalid_exact_evm_network_mismatch: {
    code: 'invalid_exact_evm_network_mismatch',
    message: "The payment names another network than the terms'",
  },
};

/** A facilitator's refusal as Sigil reports it: its reason's code and sentence, or a general one. */
export function refusalOf(reason: string | undefined): { reason: string; message: string } {
  const known = reason === undefined ? undefined : REFUSALS[reason];
  if (known) return { reason: known.code, message: known.message };
  return {
    reason: reason ?? 'invalid_payment',
    message: `The payment facilitator refused the payment (${reason ?? 'no reason given'})`,
  };
}
