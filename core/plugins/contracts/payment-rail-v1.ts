/**
 * `payment-rail` v1: charges a tool call. The gateway verifies before execution and settles only
 * after success; a rail must make `settle` idempotent per payment id and `release` free of charge.
 */
export interface PaymentRailV1 {
  readonly specVersion: 'v1';
  /** What a caller must pay, published in 402 responses. Amounts are integer base units. */
  requirements(resource: string): Promise<PaymentRequirements>;
  /** Checks a payment and reserves it atomically; rejects a payment already used or reserved. */
  verify(payment: unknown, requirements: PaymentRequirements): Promise<VerifiedPayment>;
  /** Moves the money for a verified payment; calling it again for the same id changes nothing. */
  settle(payment: VerifiedPayment): Promise<SettlementResult>;
  /** Drops a reservation after a failed execution: no charge. */
  release(payment: VerifiedPayment): Promise<void>;
}

export interface PaymentRequirements {
  scheme: string;
  network: string;
  asset: string;
  payTo: string;
  amount: bigint;
  resource: string;
}

export interface VerifiedPayment {
  id: string;
  payer: string;
  amount: bigint;
}

export interface SettlementResult {
  id: string;
  transaction: string;
}
