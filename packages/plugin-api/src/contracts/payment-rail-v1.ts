/**
 * `payment-rail` v1: how a call is paid for on one network. The rail speaks to the chain (or a
 * facilitator) and is stateless; the gateway owns the durable side: it reserves each payment before
 * verifying it, records every settlement before the money moves, settles only after success, retries,
 * recovers after a crash and reconciles with what the rail reports on chain.
 *
 * Wire objects follow x402 v2 (`PaymentRequired`, `PaymentPayload`, `SettleResponse`). Amounts are
 * integer base units of the asset.
 */
export interface PaymentRailV1 {
  /** The version of this contract the instance implements: its manifest's `specVersion`. */
  readonly specVersion: 'v1';
  /** The published terms (GET /api/payments/config). */
  terms(): PaymentTerms;
  /** The x402 v2 `PaymentRequired` object for one paid use of `resource`, with an optional reason. */
  paymentRequired(resource: PaymentResource, error?: string): X402PaymentRequired;
  /**
   * Checks a client's payment (an x402 v2 `PaymentPayload`, as parsed JSON) against the terms and
   * the chain: signature, amount, payee, asset, validity window, payer balance, authorization unused.
   * Never moves money and never throws for a bad payment: it says why.
   */
  verify(payload: unknown): Promise<VerifyOutcome>;
  /**
   * Optional: the payment `verify` would return for this payload if it were valid, read from the
   * payload alone (no signature check, no chain), or undefined when it cannot be read. The gateway
   * then writes the reservation while the payment is verified, and drops it if verification fails.
   */
  peek?(payload: unknown): VerifiedPayment | undefined;
  /**
   * Moves the money for a verified payment. For a payment already settled on chain it answers
   * `settled` again (with the transaction when known), never charging twice. A payment counts as
   * settled only when the chain shows its amount moved to `payTo` by its authorization: an
   * authorization used up any other way (cancelled by the payer, spent on another transfer) is never
   * reported `settled`; it is `rejected`, not charged.
   */
  settle(payment: VerifiedPayment): Promise<SettleOutcome>;
  /**
   * Optional: the host is recording this payment `settling` and will then call `settle`. The rail may
   * do now, while the record is written, the work of the settlement that moves no money (sign its
   * transaction), but must send nothing before `settle`. `discard` when the record was not written:
   * the settlement never leaves, and what the preparation took (a transaction nonce) is given back.
   */
  prepareSettlement?(payment: VerifiedPayment): { discard(): void };
  /**
   * Optional: sends the settlement of a payment the host has recorded `settling`, without waiting
   * for the chain to include it, and gives its transaction once the network's node accepted it; or
   * undefined when it sent nothing (a rail configured to answer after the receipt, a payment it
   * cannot send ahead): the host then calls `settle` alone, as without this method. A transaction
   * given here may answer the call before it is mined (x402's `settlement_pending` with its hash);
   * the host then calls `settle`, which for a payment sent here waits for that transaction and never
   * sends a second transfer, and answers its outcome as ever.
   */
  send?(payment: VerifiedPayment): Promise<{ transaction: string } | undefined>;
  /**
   * Optional: whether this process can send settlements now. A rail whose settling accounts are
   * leased to one replica at a time (each account's transaction nonces are one sequence) answers
   * false while this process holds none: the host then settles nothing here and leaves the
   * settlements of its calls, due in its database, to the replicas whose rail can. Absent: always.
   */
  canSettle?(): boolean;
  /**
   * Whether the payment's authorization has been used on chain, and by which transaction. `used` only
   * when that use moved the payment's amount to `payTo`: a cancelled authorization is never reported
   * used (it is `used: false, spent: true`), and no more is one spent on another transfer.
   */
  status(payment: VerifiedPayment): Promise<AuthorizationStatus>;
  /** Payments to `payTo` that the chain records from `fromBlock` on (for reconciliation). */
  settlementsOnChain(fromBlock: bigint): Promise<OnChainSettlement[]>;
  /**
   * Optional: the chain's newest block now. With it the gateway reconciles incrementally, reading
   * only the blocks since its last reading (and a margin for reorganizations); without it every
   * reconciliation reads the settlements from block 0 on.
   */
  latestBlock?(): Promise<bigint>;
  /**
   * Optional: which chain the rail settles on, told apart from another with the same chain id (a dev
   * chain started afresh) by its genesis block. With it the gateway detects, at start-up, that the
   * chain its payment records describe was replaced, and fences those records; without it, it cannot.
   */
  chainIdentity?(): Promise<RailChainIdentity>;
}

export interface RailChainIdentity {
  chainId: number;
  /** The hash of block 0. */
  genesisHash: string;
  /** The asset's contract address. */
  contract: string;
}

export interface PaymentTerms {
  scheme: string;
  /** CAIP-2, e.g. `eip155:8453`. */
  network: string;
  chainId: number;
  asset: { address: string; name: string; version: string; decimals: number };
  /** Base units per paid call. */
  pricePerCall: bigint;
  payTo: string;
  /** How long a payment authorization must stay valid: signing, verification, the call and settlement. */
  maxTimeoutSeconds: number;
  facilitator: 'builtin' | 'remote';
}

export interface PaymentResource {
  /** e.g. `mcp://tool/probe__echo` or the request URL. */
  url: string;
  description: string;
}

/** x402 v2 `PaymentRequired`; kept structural so the contract needs no x402 package. */
export interface X402PaymentRequired {
  x402Version: 2;
  error?: string;
  resource: { url: string; description?: string; mimeType?: string };
  accepts: Record<string, unknown>[];
  extensions?: Record<string, unknown>;
}

export interface VerifiedPayment {
  /** Unique per authorization (payer and nonce): the key the gateway reserves. */
  id: string;
  payer: string;
  amount: bigint;
  /** Unix seconds after which the authorization can no longer be settled. */
  validBefore: number;
  /** What `settle` needs later, perhaps after a restart: JSON, stored by the gateway, never logged. */
  authorization: Record<string, unknown>;
}

/**
 * A refusal's `reason` is a stable code (`payment_already_used` for an authorization already used),
 * and its `message` one sentence the payer reads as it is: never a library's or a node's error dump.
 */
export type VerifyOutcome =
  | { valid: true; payment: VerifiedPayment }
  | { valid: false; reason: string; message: string; payer?: string };

/** How a payment's authorization stands on chain (`status()`). */
export type AuthorizationStatus =
  /** Used by a transfer of the payment's amount to `payTo`: the payment is settled. */
  | { used: true; transaction?: string }
  /** Not used: it may still settle, until it expires. */
  | { used: false; spent?: false }
  /**
   * Used up without paying `payTo` (the payer cancelled it, or it moved money elsewhere): it can never
   * settle, and the payment is not charged. `reason` is a stable code such as `authorization_canceled`.
   */
  | { used: false; spent: true; reason: string; transaction?: string };

export type SettleOutcome =
  | { status: 'settled'; transaction: string; payer: string }
  /** Will never succeed (authorization expired or used elsewhere, balance gone): not charged. */
  | { status: 'rejected'; reason: string; message: string }
  /**
   * Could not be decided now (RPC down, timeout): try again later; the authorization may still be used.
   * `authorizationUsed` when the chain shows the authorization used but the rail cannot prove yet that
   * the use paid `payTo` (its events not readable): the payer may have cancelled it, so the host must
   * withhold the call's result until a later attempt proves the payment.
   */
  | { status: 'retry'; reason: string; message: string; authorizationUsed?: true };

export interface OnChainSettlement {
  id: string;
  payer: string;
  amount: bigint;
  transaction: string;
  block: bigint;
}
