import type { FacilitatorClient } from '@x402/core/server';
import { parsePaymentPayload } from '@x402/core/schemas';
import type { PaymentPayload, PaymentRequirements, SettleError, VerifyError } from '@x402/core/types';
import {
  createPublicClient,
  defineChain,
  getAddress,
  isAddress,
  isAddressEqual,
  parseAbi,
  parseEventLogs,
  type Address,
  type Hex,
  type Log,
  type PublicClient,
} from 'viem';
import {
  type AuthorizationStatus,
  type Clock,
  type Leases,
  type OnChainSettlement,
  type PluginLogger,
  type PaymentRailV1,
  type PaymentResource,
  type PaymentTerms,
  type RailChainIdentity,
  type SettleOutcome,
  SigilError,
  type VerifiedPayment,
  type VerifyOutcome,
  type X402PaymentRequired,
} from '@sigil/plugin-api';
import { blockRanges, blockRangesBackwards, readChainIdentity } from '@sigil/plugin-api/chain';
import type { X402EvmConfig } from './config.ts';
import { createFacilitator, SETTLEMENT_MARGIN_SECONDS, type Facilitator } from './facilitator.ts';
import { refusalOf } from './refusals.ts';
import { rpcTransport } from './transport.ts';

const eip3009 = parseAbi([
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
  'event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce)',
]);
const [, AUTHORIZATION_USED, TRANSFER, AUTHORIZATION_CANCELED] = eip3009;

/** Failures no retry can cure: the payment will never settle as it is. */
const PERMANENT =
  /signature|recipient|value_mismatch|valid_before|valid_after|insufficient|requirements|payload/;
/** How many log ranges back status() looks for the event that used up an authorization. */
const STATUS_LOOKBACK_RANGES = 5;

interface StoredAuthorization extends Record<string, unknown> {
  payload: PaymentPayload;
  requirements: PaymentRequirements;
}

/** What a payload claims to be, or why it is no payment of ours. */
type ReadPayload = { payment: VerifiedPayment } | Extract<VerifyOutcome, { valid: false }>;

/** `value`, and every object in it, frozen: shared values no caller may change. */
function deepFreeze<T extends object>(value: T): Readonly<T> {
  for (const member of Object.values(value))
    if (typeof member === 'object' && member !== null) deepFreeze(member);
  return Object.freeze(value);
}

interface Eip3009Authorization {
  from: string;
  to: string;
  value: string;
  validAfter: string;
  validBefore: string;
  nonce: string;
}

/** The x402 `exact` scheme on an EVM chain: EIP-3009 `transferWithAuthorization` of a dollar token. */
export class X402EvmRail implements PaymentRailV1 {
  readonly specVersion = 'v1' as const;
  private readonly chainId: number;
  private readonly publicClient: PublicClient;
  private readonly facilitator: FacilitatorClient &
    Partial<Pick<Facilitator, 'canSettle' | 'prepare' | 'send' | 'start' | 'stop'>>;

  private readonly clock: Clock;
  /**
   * The terms and x402 requirements, fixed by the config: made once (each names addresses in their
   * checksummed form, a keccak hash apiece), frozen since every payment shares them.
   */
  private readonly fixedTerms: PaymentTerms;
  private readonly fixedRequirements: PaymentRequirements;
  /** What each payload read (peek, then verify) was found to be: one parse per payment. */
  private readonly reads = new WeakMap<object, ReadPayload>();

  constructor(
    private readonly config: X402EvmConfig,
    /**
     * `clock` times the authorizations' validity; `facilitator` replaces the configured one; with
     * `leasing`, the built-in facilitator's accounts are leased, one per replica (see SettlingAccounts).
     */
    deps: {
      clock: Clock;
      facilitator?: FacilitatorClient;
      leasing?: { leases: Leases; logger?: PluginLogger };
    },
  ) {
    this.clock = deps.clock;
    this.chainId = Number(config.network.split(':')[1]);
    const asset = getAddress(config.asset.address);
    const payTo = getAddress(config.payTo);
    this.fixedTerms = deepFreeze({
      scheme: 'exact',
      network: config.network,
      chainId: this.chainId,
      asset: { ...config.asset, address: asset },
      pricePerCall: config.pricePerCall,
      payTo,
      maxTimeoutSeconds: config.maxTimeoutSeconds,
      facilitator: config.facilitator.kind,
    });
    this.fixedRequirements = deepFreeze({
      scheme: 'exact',
      network: config.network as `${string}:${string}`,
      asset,
      amount: config.pricePerCall.toString(),
      payTo,
      maxTimeoutSeconds: config.maxTimeoutSeconds,
      extra: { name: config.asset.name, version: config.asset.version },
    });
    const chain = defineChain({
      id: this.chainId,
      name: config.network,
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [config.rpcUrl] } },
    });
    // viem polls for receipts every 4 s by default: most of a paid call's latency on a fast chain.
    this.publicClient = createPublicClient({
      chain,
      transport: rpcTransport(config.rpcUrl),
      pollingInterval: config.pollingIntervalMs,
    });
    this.facilitator =
      deps.facilitator ?? createFacilitator(config, chain, this.publicClient, deps.clock, deps.leasing);
  }

  /** Takes a settling account's lease when one is free (the built-in facilitator's, when leased). */
  async start(): Promise<void> {
    await this.facilitator.start?.();
  }

  canSettle(): boolean {
    return this.facilitator.canSettle?.() ?? true;
  }

  /**
   * Gives the settling account up, and closes the RPC WebSocket, if any (the facilitator's client
   * shares it), so nothing reconnects after stop.
   */
  async stop(): Promise<void> {
    await this.facilitator.stop?.();
    const transport = this.publicClient.transport as { getRpcClient?: () => Promise<{ close(): void }> };
    (await transport.getRpcClient?.())?.close();
  }

  terms(): PaymentTerms {
    return this.fixedTerms;
  }

  paymentRequired(resource: PaymentResource, error?: string): X402PaymentRequired {
    return {
      x402Version: 2,
      ...(error === undefined ? {} : { error }),
      resource: { url: resource.url, description: resource.description, mimeType: 'application/json' },
      accepts: [this.requirements()],
    };
  }

  peek(payload: unknown): VerifiedPayment | undefined {
    const read = this.read(payload);
    return 'payment' in read ? read.payment : undefined;
  }

  async verify(payload: unknown): Promise<VerifyOutcome> {
    const read = this.read(payload);
    if (!('payment' in read)) return read;
    const { payload: parsed, requirements } = read.payment.authorization as StoredAuthorization;
    let result;
    try {
      result = await this.facilitator.verify(parsed, requirements);
    } catch (err) {
      if (!isFacilitatorRefusal<VerifyError>(err, 'VerifyError')) {
        throw new SigilError('unavailable', 'The payment facilitator could not verify the payment now', {
          hint: 'Try again; nothing was charged',
          cause: err,
        });
      }
      result = { isValid: false, invalidReason: err.invalidReason, invalidMessage: err.invalidMessage };
    }
    if (!result.isValid) {
      return {
        valid: false,
        ...refusalOf(result.invalidReason),
        ...(result.payer ? { payer: result.payer } : {}),
      };
    }
    return { valid: true, payment: read.payment };
  }

  /** `read` of a payload, once per payload object: peek and verify of one payment share it. */
  private read(payload: unknown): ReadPayload {
    if (typeof payload !== 'object' || payload === null) return this.readNow(payload);
    let read = this.reads.get(payload);
    if (!read) {
      read = this.readNow(payload);
      this.reads.set(payload, read);
    }
    return read;
  }

  /** The payment a payload claims to be, from its own fields and our terms, before any check of it. */
  private readNow(payload: unknown): ReadPayload {
    const parsed = parsePaymentPayload(payload);
    if (!parsed.success || parsed.data.x402Version !== 2) {
      return { valid: false, reason: 'invalid_payload', message: 'Not an x402 v2 PaymentPayload' };
    }
    const payment = parsed.data as PaymentPayload;
    const requirements = this.requirements();
    const mismatch = requirementsMismatch(payment.accepted, requirements);
    if (mismatch) return { valid: false, reason: 'requirements_mismatch', message: mismatch };
    const authorization = authorizationOf(payment);
    if (!authorization) {
      return {
        valid: false,
        reason: 'invalid_payload',
        message: 'The payload holds no EIP-3009 authorization',
      };
    }
    if (!isAddress(authorization.from, { strict: false })) {
      return {
        valid: false,
        reason: 'invalid_payload',
        message: 'The authorization’s "from" is not an address',
      };
    }
    const stored: StoredAuthorization = { payload: payment, requirements };
    return {
      payment: {
        id: paymentId(this.config, authorization),
        payer: getAddress(authorization.from),
        amount: BigInt(authorization.value),
        validBefore: Number(authorization.validBefore),
        authorization: stored,
      },
    };
  }

  /** Signs the settlement transaction ahead, when the facilitator is this process's (see Facilitator.prepare). */
  prepareSettlement(payment: VerifiedPayment): { discard(): void } {
    const { payload, requirements } = payment.authorization as StoredAuthorization;
    return this.facilitator.prepare?.(payload, requirements) ?? { discard: () => undefined };
  }

  /** Sends the settlement ahead of `settle`, with `answerAfter: "broadcast"` (see Facilitator.send). */
  async send(payment: VerifiedPayment): Promise<{ transaction: string } | undefined> {
    const { payload, requirements } = payment.authorization as StoredAuthorization;
    const transaction = await this.facilitator.send?.(payload, requirements);
    return transaction === undefined ? undefined : { transaction };
  }

  async settle(payment: VerifiedPayment): Promise<SettleOutcome> {
    const { payload, requirements } = payment.authorization as StoredAuthorization;
    let failure: { reason: string; message: string };
    try {
      const result = await this.facilitator.settle(payload, requirements);
      if (result.success) return { status: 'settled', transaction: result.transaction, payer: payment.payer };
      failure = {
        reason: result.errorReason ?? 'settlement_failed',
        message: result.errorMessage ?? result.errorReason ?? 'settlement failed',
      };
    } catch (err) {
      failure = isFacilitatorRefusal<SettleError>(err, 'SettleError')
        ? { reason: err.errorReason ?? 'settlement_failed', message: err.errorMessage ?? err.message }
        : { reason: 'unreachable', message: (err as Error).message };
    }
    // Whatever the failure says, the chain decides: settled only if the authorization paid this payee
    // (our earlier attempt landed), never merely because its nonce is used: the payer's own
    // cancelAuthorization uses it too, and a paid result must not be served for that.
    let used: boolean;
    try {
      used = await this.nonceUsed(payment);
    } catch (err) {
      return { status: 'retry', reason: 'unreachable', message: (err as Error).message };
    }
    let standing: AuthorizationStatus = { used: false };
    if (used) {
      try {
        standing = await this.howUsed(payment);
      } catch (err) {
        // Used, but by whom is not readable (logs refused, or lagging behind the head on public
        // RPCs): maybe our transfer, maybe the payer's cancellation. The host withholds the result.
        const message = (err as Error).message;
        return { status: 'retry', reason: 'settlement_unproven', message, authorizationUsed: true };
      }
    }
    if (standing.used)
      return { status: 'settled', transaction: standing.transaction ?? '', payer: payment.payer };
    if (standing.spent) {
      return {
        status: 'rejected',
        reason: standing.reason,
        message: `The authorization was used up on chain without paying for this call (${standing.reason})`,
      };
    }
    const expired = this.clock.now().getTime() / 1000 >= payment.validBefore - SETTLEMENT_MARGIN_SECONDS;
    if (expired) return { status: 'rejected', reason: 'authorization_expired', message: failure.message };
    if (PERMANENT.test(failure.reason)) return { status: 'rejected', ...failure };
    return { status: 'retry', ...failure };
  }

  async status(payment: VerifiedPayment): Promise<AuthorizationStatus> {
    return (await this.nonceUsed(payment)) ? this.howUsed(payment) : { used: false };
  }

  /** Whether the token marks the payment's authorization used (by a transfer or a cancellation). */
  private async nonceUsed(payment: VerifiedPayment): Promise<boolean> {
    const { from, nonce } = authorizationOf((payment.authorization as StoredAuthorization).payload) ?? {};
    if (!from || !nonce) return false;
    return this.publicClient.readContract({
      address: this.config.asset.address as Address,
      abi: eip3009,
      functionName: 'authorizationState',
      args: [from as Address, nonce as Hex],
    });
  }

  /**
   * How a used authorization was used up, from the chain's event for its nonce, looked for in the
   * newest STATUS_LOOKBACK_RANGES log ranges (a payment is asked about while its authorization is
   * valid, or soon after): AuthorizationCanceled is the payer's cancellation, never a payment;
   * AuthorizationUsed pays us only if the token's next log in that transaction is the Transfer of the
   * payment's amount from the payer to `payTo` (EIP-3009 tokens, FiatToken as SigilDollar, mark the
   * nonce used and then transfer). Throws when no event says: the record waits for a later attempt.
   */
  private async howUsed(payment: VerifiedPayment): Promise<AuthorizationStatus> {
    const { from, nonce } = authorizationOf((payment.authorization as StoredAuthorization).payload) ?? {};
    if (!from || !nonce) return { used: false };
    const authorizer = from as Address;
    const token = this.config.asset.address as Address;
    const latest = await this.publicClient.getBlockNumber({ cacheTime: 0 });
    let ranges = 0;
    for (const range of blockRangesBackwards(this.config.startBlock, latest, this.config.logBlockRange)) {
      if (ranges++ >= STATUS_LOOKBACK_RANGES) break;
      const args = { authorizer, nonce: nonce as Hex };
      const [used, canceled] = await Promise.all([
        this.publicClient.getLogs({ address: token, event: AUTHORIZATION_USED, args, ...range }),
        this.publicClient.getLogs({ address: token, event: AUTHORIZATION_CANCELED, args, ...range }),
      ]);
      const cancellation = canceled[0];
      if (cancellation)
        return {
          used: false,
          spent: true,
          reason: 'authorization_canceled',
          transaction: cancellation.transactionHash,
        };
      const use = used[0];
      if (!use) continue;
      const receipt = await this.publicClient.getTransactionReceipt({ hash: use.transactionHash });
      const next = receipt.logs.find(
        (log) => log.logIndex > use.logIndex && isAddressEqual(log.address, token),
      );
      const [transfer] = next ? parseEventLogs({ abi: eip3009, eventName: 'Transfer', logs: [next] }) : [];
      const paid =
        transfer !== undefined &&
        isAddressEqual(transfer.args.from, authorizer) &&
        isAddressEqual(transfer.args.to, this.config.payTo as Address) &&
        transfer.args.value === payment.amount;
      return paid
        ? { used: true, transaction: use.transactionHash }
        : {
            used: false,
            spent: true,
            reason: 'authorization_used_elsewhere',
            transaction: use.transactionHash,
          };
    }
    throw new SigilError('unavailable', 'The authorization is used on chain, but no recent event says how', {
      hint: 'Its settlement is tried again later; the reconciler compares the records with the chain',
    });
  }

  latestBlock(): Promise<bigint> {
    return this.publicClient.getBlockNumber({ cacheTime: 0 });
  }

  chainIdentity(): Promise<RailChainIdentity> {
    return readChainIdentity(this.publicClient, this.config.asset.address);
  }

  async settlementsOnChain(fromBlock: bigint): Promise<OnChainSettlement[]> {
    const address = this.config.asset.address as Address;
    const start = fromBlock > this.config.startBlock ? fromBlock : this.config.startBlock;
    const latest = await this.publicClient.getBlockNumber({ cacheTime: 0 });
    const used: Log<bigint, number, false, typeof AUTHORIZATION_USED>[] = [];
    const transfersByTransaction = new Map<string, Log<bigint, number, false, typeof TRANSFER>[]>();
    for (const range of blockRanges(start, latest, this.config.logBlockRange)) {
      const [usedInRange, transfersInRange] = await Promise.all([
        this.publicClient.getLogs({ address, event: AUTHORIZATION_USED, ...range }),
        this.publicClient.getLogs({
          address,
          event: TRANSFER,
          args: { to: this.config.payTo as Address },
          ...range,
        }),
      ]);
      used.push(...usedInRange);
      for (const transfer of transfersInRange) {
        const inTransaction = transfersByTransaction.get(transfer.transactionHash) ?? [];
        inTransaction.push(transfer);
        transfersByTransaction.set(transfer.transactionHash, inTransaction);
      }
    }
    const settlements: OnChainSettlement[] = [];
    for (const log of used) {
      const { authorizer, nonce } = log.args;
      if (authorizer === undefined || nonce === undefined) continue;
      const transfer = transfersByTransaction
        .get(log.transactionHash)
        ?.find((t) => t.args.from !== undefined && isAddressEqual(t.args.from, authorizer));
      if (!transfer) continue;
      settlements.push({
        id: paymentId(this.config, { from: authorizer, nonce }),
        payer: getAddress(authorizer),
        amount: transfer.args.value ?? 0n,
        transaction: log.transactionHash,
        block: log.blockNumber,
      });
    }
    return settlements;
  }

  private requirements(): PaymentRequirements {
    return this.fixedRequirements;
  }
}

/**
 * Whether a remote facilitator answered with a refusal (x402's VerifyError or SettleError). By name,
 * not `instanceof`: x402's entry points bundle their own copies of these classes.
 */
function isFacilitatorRefusal<E extends Error>(err: unknown, name: string): err is E {
  return err instanceof Error && err.name === name;
}

/** One id per authorization: EIP-3009 nonces are unique per authorizer and token. */
function paymentId(config: X402EvmConfig, authorization: { from: string; nonce: string }): string {
  return [config.network, config.asset.address, authorization.from, authorization.nonce]
    .join(':')
    .toLowerCase();
}

function authorizationOf(payment: PaymentPayload): Eip3009Authorization | undefined {
  const authorization = (payment.payload as { authorization?: Partial<Eip3009Authorization> }).authorization;
  const fields = ['from', 'to', 'value', 'validAfter', 'validBefore', 'nonce'] as const;
  if (!authorization || !fields.every((field) => typeof authorization[field] === 'string')) return undefined;
  if (!/^\d+$/.test(authorization.value as string) || !/^\d+$/.test(authorization.validBefore as string))
    return undefined;
  return authorization as Eip3009Authorization;
}

/** What differs between the terms a client accepted and ours, in words; undefined when they match. */
function requirementsMismatch(accepted: PaymentRequirements, ours: PaymentRequirements): string | undefined {
  const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();
  const checks: [string, boolean][] = [
    ['scheme', accepted.scheme === ours.scheme],
    ['network', accepted.network === ours.network],
    ['asset', same(accepted.asset, ours.asset)],
    ['amount', accepted.amount === ours.amount],
    ['payTo', same(accepted.payTo, ours.payTo)],
  ];
  const wrong = checks.filter(([, ok]) => !ok).map(([field]) => field);
  if (wrong.length === 0) return undefined;
  return `The accepted ${wrong.join(', ')} ${wrong.length === 1 ? 'does' : 'do'} not match the terms (${wrong
    .map((field) => `${field} ${String(ours[field as keyof PaymentRequirements])}`)
    .join(', ')})`;
}
