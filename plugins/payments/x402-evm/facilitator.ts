import { InMemoryPendingSettlementStore, x402Facilitator } from '@x402/core/facilitator';
import { HTTPFacilitatorClient, type FacilitatorClient } from '@x402/core/server';
import type {
  PaymentPayload,
  PaymentRequirements,
  SettleResponse,
  SupportedResponse,
} from '@x402/core/types';
import { toFacilitatorEvmSigner, type ExactEIP3009Payload } from '@x402/evm';
import { ExactEvmScheme as ExactEvmFacilitator } from '@x402/evm/exact/facilitator';
import {
  BaseError,
  MethodNotFoundRpcError,
  MethodNotSupportedRpcError,
  createWalletClient,
  encodeFunctionData,
  getAddress,
  keccak256,
  isAddressEqual,
  parseAbi,
  parseEventLogs,
  parseSignature,
  type Address,
  type Chain,
  type FeeValuesEIP1559,
  type Hex,
  type PublicClient,
  type TransactionReceipt,
  type WalletClient,
  WaitForTransactionReceiptTimeoutError,
} from 'viem';
import { sendRawTransaction, sendRawTransactionSync, waitForTransactionReceipt } from 'viem/actions';
import { privateKeyToAccount, type PrivateKeyAccount } from 'viem/accounts';
import { TtlCache } from '@sigil/plugin-api/cache';
import type { Clock, Leases, PluginLogger } from '@sigil/plugin-api';
import { SettlingAccounts } from './accounts.ts';
import { facilitatorKeys, type X402EvmConfig } from './config.ts';
import { LocalNonces } from './nonces.ts';
import { ReceiptWatch } from './receipts.ts';
import { causedBy, rpcTransport } from './transport.ts';

const transferWithAuthorization = parseAbi([
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
]);

/** x402's margin: an authorization must stay valid this long after settlement is sent. */
export const SETTLEMENT_MARGIN_SECONDS = 6;
/** Whether an authorization valid before `validBefore` (Unix seconds) still leaves time to settle. */
const settlesInTime = (validBefore: string, now: bigint): boolean =>
  BigInt(validBefore) >= now + BigInt(SETTLEMENT_MARGIN_SECONDS);
const nowSeconds = (clock: Clock): bigint => BigInt(Math.floor(clock.now().getTime() / 1000));
/** A payer's (and the token's) code is read once for the verification and the settlement of one payment. */
const CODE_TTL_MS = 5_000;
/**
 * Fee estimates are reused this long. Settlement offers viem's estimate (1.2 × the base fee, plus the
 * priority fee); a base fee rises at most 12.5 % a block, so within one block interval the offer still
 * covers it. Should it not, the node refuses the transaction before it leaves and x402's path
 * settles with a fresh estimate.
 */
const FEES_TTL_MS = 1_000;
/** Payments verified here and waiting for their call to finish; more are settled the long way. */
const MAX_REMEMBERED = 20_000;
/** The settlement failure of a process that holds no settling account (a retry, never a refusal). */
const NO_ACCOUNT = 'no_facilitator_account';

/** A facilitator, and whether this process can settle through it now (see SettlingAccounts). */
export interface Facilitator extends FacilitatorClient {
  canSettle(): boolean;
  /**
   * Signs the settlement transaction of a payment verified here, ahead of `settle` (while the host
   * records the payment `settling`), and sends nothing: `settle` sends it. `discard` (the record was
   * not written) never sends the transfer; it fills the transaction nonce the signature took with an
   * empty transaction, so later settlements from the account are not held behind a gap.
   */
  prepare(payload: PaymentPayload, requirements: PaymentRequirements): { discard(): void };
  /**
   * With `answerAfter: "broadcast"`, sends the settlement `prepare` signed (eth_sendRawTransaction)
   * and gives its hash once the node accepted it; `settle` then awaits that transaction. Undefined
   * when nothing was sent: `settle` settles it as ever.
   */
  send(payload: PaymentPayload, requirements: PaymentRequirements): Promise<Hex | undefined>;
  /** Takes a settling account's lease when one is free (built-in facilitator with leases). */
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** What settles from one account: its wallet (with this process's count of its nonces) and x402's facilitator. */
interface Settler {
  account: PrivateKeyAccount;
  /** The account's nonce manager: x402's path takes nonces from it through viem, `Presigned` holds them. */
  nonces: LocalNonces;
  wallet: WalletClient;
  facilitator: x402Facilitator;
}

/**
 * The facilitator that verifies and settles: in this process, with the operator's own accounts on the
 * configured RPC (one at a time per replica, leased when `leases` are given: see SettlingAccounts),
 * or a remote one at the configured URL (never the x402 library's public default).
 */
export function createFacilitator(
  config: X402EvmConfig,
  chain: Chain,
  publicClient: PublicClient,
  clock: Clock,
  leasing?: { leases: Leases; logger?: PluginLogger },
): Facilitator {
  const settings = config.facilitator;
  if (settings.kind === 'remote') {
    const remote = new HTTPFacilitatorClient({ url: settings.url, timeoutMs: settings.timeoutMs });
    return Object.assign(remote, {
      canSettle: () => true,
      prepare: () => ({ discard: () => undefined }),
      send: () => Promise.resolve(undefined),
      start: () => Promise.resolve(),
      stop: () => Promise.resolve(),
    });
  }
  // x402 reads the payer's code twice in verify and twice again in settle: once per payment is enough.
  const codes = new TtlCache<string, Hex | undefined>({ ttlMs: CODE_TTL_MS, maxEntries: 10_000 });
  const codeAt = (address: string) =>
    codes.get(address.toLowerCase(), () => publicClient.getCode({ address: address as Address }));
  /** Settlement transactions seen replaced in the pool (see receiptOfOwn), until x402 asks to keep one. */
  const replaced = new Set<string>();
  const settlerOf = (key: Hex): Settler => {
    const nonces = new LocalNonces();
    const account = privateKeyToAccount(key, { nonceManager: nonces });
    const wallet = createWalletClient({ account, chain, transport: rpcTransport(config.rpcUrl) });
    const signer = toFacilitatorEvmSigner({
      address: account.address,
      getCode: (args) => codeAt(args.address),
      readContract: (args) =>
        simulations.take(args) ??
        publicClient.readContract({ ...args, args: args.args ?? [] } as Parameters<
          typeof publicClient.readContract
        >[0]),
      // viem's overloads (by block hash, number or tag) are narrower than x402's plain parameter types.
      verifyTypedData: (args) =>
        publicClient.verifyTypedData(args as Parameters<typeof publicClient.verifyTypedData>[0]),
      writeContract: (args) => wallet.writeContract(args as Parameters<typeof wallet.writeContract>[0]),
      sendTransaction: (args) => wallet.sendTransaction(args),
      waitForTransactionReceipt: (args) => receiptOfOwn(publicClient, args.hash, replaced),
    });
    const facilitator = new x402Facilitator().register(
      config.network as `${string}:${string}`,
      new ExactEvmFacilitator(signer, { pendingSettlementStore: new PendingUnlessReplaced(replaced) }),
    );
    return { account, nonces, wallet, facilitator };
  };
  const keys = facilitatorKeys(settings) as Hex[];
  const accounts = new SettlingAccounts(
    keys,
    settlerOf,
    leasing && { ...leasing, network: config.network, ttlMs: settings.accountLeaseSeconds * 1000 },
  );
  // x402's verification only reads the chain: any account's facilitator verifies (none sends from it).
  const verifier = settlerOf(keys[0] as Hex).facilitator;
  const verified = new VerifiedPayments(clock);
  const simulations = new Simulations(publicClient);
  const fees = new TtlCache<'fees', FeeValuesEIP1559>({ ttlMs: FEES_TTL_MS, maxEntries: 1 });
  const currentFees = () => fees.get('fees', () => publicClient.estimateFeesPerGas());
  let syncSettlement = true;
  const presigned = new Presigned(clock);
  /** Settlements sent ahead of `settle` (answerAfter "broadcast"), by verifiedKey, and their receipts. */
  const broadcasts = new Map<string, { hash: Hex; call: TransferCall }>();
  const receipts = new ReceiptWatch(publicClient, config.pollingIntervalMs);
  return {
    prepare: (payload, requirements) => {
      const settler = accounts.current();
      const call = verified.peek(payload, requirements);
      const key = verifiedKey(payload, requirements);
      if (!settler || !call || !key || !syncSettlement) return { discard: () => undefined };
      const signed = presigned.sign(key, settler, call, BigInt(config.settlementGasLimit), currentFees);
      return { discard: () => presigned.discard(key, signed) };
    },
    send: async (payload, requirements) => {
      if (config.answerAfter !== 'broadcast') return undefined;
      const key = verifiedKey(payload, requirements);
      const call = verified.peek(payload, requirements);
      const settler = await accounts.ensure();
      if (!key || !call || !settler) return undefined;
      const { validBefore } = (payload.payload as unknown as ExactEIP3009Payload).authorization;
      if (!settlesInTime(validBefore, nowSeconds(clock))) return undefined;
      const gas = BigInt(config.settlementGasLimit);
      // Signed while the mark was written, unless prepare could not (no account then): signed now.
      const signed =
        (await presigned.take(key, settler)) ??
        (await presigned.sign(key, settler, call, gas, currentFees).then(() => presigned.take(key, settler)));
      if (!signed) return undefined;
      const hash = await sendAhead(settler.wallet, signed).catch(() => undefined);
      // Refused before it left (its nonce is read again): `settle` signs the transfer anew.
      if (hash) broadcasts.set(key, { hash, call });
      return hash;
    },
    verify: async (payload, requirements) => {
      const simulation = simulations.start(payload, requirements);
      // Read now, while the payment is checked: its settlement then needs no read before it is sent.
      currentFees().catch(() => undefined);
      try {
        if (simulation && (await validOnChain(payload, requirements, simulation.answer, codeAt, clock))) {
          verified.remember(payload, requirements, simulation.call);
          return {
            isValid: true,
            payer: (payload.payload as unknown as ExactEIP3009Payload).authorization.from,
          };
        }
        const result = await verifier.verify(payload, requirements);
        if (result.isValid) verified.remember(payload, requirements, simulation?.call);
        return result;
      } finally {
        simulation?.forget();
      }
    },
    settle: async (payload, requirements) => {
      const key = verifiedKey(payload, requirements);
      const broadcast = key === undefined ? undefined : broadcasts.get(key);
      if (key !== undefined && broadcast) {
        broadcasts.delete(key);
        // Its transfer was sent: never sent again from here (a retry takes x402's path).
        verified.take(payload, requirements);
        // Awaited without a settling account: the transaction is on its way, whoever holds the lease.
        // Not mined in time: pending (the rail then asks the chain by the authorization's nonce). Reverted,
        // or the receipt unreadable: x402's path decides, and its send of the same authorization again
        // costs gas at worst, never a second charge.
        const outcome = await receipts
          .wait(broadcast.hash, RECEIPT_WAIT_MS)
          .then((receipt) => settlementOf(receipt, broadcast.call, payload, requirements))
          .catch((err: unknown) =>
            causedBy(err, WaitForTransactionReceiptTimeoutError)
              ? pendingSettlement(payload, requirements)
              : undefined,
          );
        if (outcome) return outcome;
        const settler = await accounts.ensure();
        return settler ? settler.facilitator.settle(payload, requirements) : noAccount(requirements);
      }
      const settler = await accounts.ensure();
      // The account's lease was lost since the host asked: whoever holds one settles it later.
      if (!settler) return noAccount(requirements);
      const { account, wallet, facilitator } = settler;
      const call = verified.take(payload, requirements);
      const signed = await presigned.take(key, settler);
      if (!call || !syncSettlement) {
        if (signed) presigned.fill(signed);
        return facilitator.settle(payload, requirements);
      }
      const outcome = await settleVerified({
        signed,
        payload,
        requirements,
        call,
        wallet,
        account,
        clock,
        gas: BigInt(config.settlementGasLimit),
        fees: await currentFees().catch(() => undefined),
        noSync: () => (syncSettlement = false),
        refused: () => fees.delete('fees'),
      });
      // Signed ahead but not sent (the authorization's window closed meanwhile): its nonce is filled.
      if (signed && !signed.sent) presigned.fill(signed);
      // Refused before a transaction left (a revert in gas estimation, say): x402's own path decides
      // again and names the reason precisely.
      return outcome ?? facilitator.settle(payload, requirements);
    },
    getSupported: () => Promise.resolve(verifier.getSupported() as SupportedResponse),
    canSettle: () => accounts.current() !== undefined,
    start: () => accounts.start(),
    stop: () => {
      receipts.stop();
      return accounts.stop();
    },
  };
}

/**
 * The transfer's simulation (an eth_call), started as verification begins: `validOnChain` awaits it,
 * and should x402's verify run after all, its own read of the same call takes the answer. Only a read
 * identical in every argument does; anything else reads the chain itself.
 */
class Simulations {
  private readonly running = new Map<string, Promise<unknown>>();

  constructor(private readonly publicClient: PublicClient) {}

  start(
    payload: PaymentPayload,
    requirements: PaymentRequirements,
  ): { answer: Promise<unknown>; call: TransferCall; forget(): void } | undefined {
    const call = transferCall(payload, requirements);
    if (!call) return undefined;
    const key = readKey(call);
    const answer = this.publicClient.readContract(call);
    answer.catch(() => undefined); // a refusal reaches x402 when it reads; unread, it is dropped
    this.running.set(key, answer);
    return { answer, call, forget: () => this.running.delete(key) };
  }

  take(read: {
    address: string;
    functionName: string;
    args?: readonly unknown[];
  }): Promise<unknown> | undefined {
    const key = readKey(read);
    const answer = this.running.get(key);
    this.running.delete(key);
    return answer;
  }
}

/** A read's identity: contract, function and arguments (numbers of any type compared as decimals). */
const readKey = (read: { address: string; functionName: string; args?: readonly unknown[] }): string =>
  JSON.stringify([read.address.toLowerCase(), read.functionName, read.args ?? []], (_, value: unknown) =>
    typeof value === 'bigint' || typeof value === 'number' ? String(value) : value,
  );

/**
 * Whether a payment is valid as x402's verify would find it, decided without x402's recovery of the
 * signer (pure-JS secp256k1: 2 ms of CPU here, a fifth of a paid call's overhead). x402's verify
 * checks the fields against the requirements, recovers the signer, then simulates the transfer; the
 * simulation alone has the token check the signature, the window, the balance and the nonce, natively
 * and against the chain. So: the same field checks, the same simulation (already under way), and
 * accounts as x402 takes them (a token with code, a payer without: no ERC-1271 or ERC-6492). False
 * means not decided here: x402's verify then runs in full, so a refusal always carries x402's reason.
 * Hand-written because x402 offers no way to verify with the signature check left to the chain.
 */
export async function validOnChain(
  payload: PaymentPayload,
  requirements: PaymentRequirements,
  simulation: Promise<unknown>,
  codeAt: (address: string) => Promise<Hex | undefined>,
  clock: Clock,
): Promise<boolean> {
  const { authorization } = ecdsaAuthorization(payload) ?? {};
  if (!authorization) return false;
  const now = nowSeconds(clock);
  try {
    const fieldsMatch =
      payload.accepted.scheme === 'exact' &&
      requirements.scheme === 'exact' &&
      payload.accepted.network === requirements.network &&
      typeof requirements.extra?.name === 'string' &&
      typeof requirements.extra.version === 'string' &&
      isAddressEqual(authorization.to as Address, requirements.payTo as Address) &&
      BigInt(authorization.value) === BigInt(requirements.amount) &&
      BigInt(authorization.validAfter) <= now &&
      settlesInTime(authorization.validBefore, now);
    if (!fieldsMatch) return false;
    const [tokenCode, payerCode] = await Promise.all([
      codeAt(requirements.asset),
      codeAt(authorization.from),
      simulation,
    ]);
    return hasCode(tokenCode) && !hasCode(payerCode);
  } catch {
    return false; // malformed, reverted or unreachable: x402's verification says which
  }
}

const hasCode = (code: Hex | undefined): boolean => code !== undefined && code !== '0x';

/** A payment's EIP-3009 authorization signed by a plain 65-byte ECDSA signature (not ERC-6492/1271). */
function ecdsaAuthorization(payload: PaymentPayload): ExactEIP3009Payload | undefined {
  const { authorization, signature } = payload.payload as Partial<ExactEIP3009Payload>;
  if (!authorization || typeof signature !== 'string' || !/^0x[0-9a-fA-F]{130}$/.test(signature))
    return undefined;
  return { authorization, signature };
}

/** transferWithAuthorization of an ECDSA-signed EIP-3009 payment, as x402 simulates and we settle it. */
type TransferCall = NonNullable<ReturnType<typeof transferCall>>;

function transferCall(payload: PaymentPayload, requirements: PaymentRequirements) {
  const { authorization, signature } = ecdsaAuthorization(payload) ?? {};
  if (!authorization || !signature) return undefined;
  try {
    const { v, r, s, yParity } = parseSignature(signature as Hex);
    return {
      address: getAddress(requirements.asset),
      abi: transferWithAuthorization,
      functionName: 'transferWithAuthorization' as const,
      args: [
        getAddress(authorization.from),
        getAddress(authorization.to),
        BigInt(authorization.value),
        BigInt(authorization.validAfter),
        BigInt(authorization.validBefore),
        authorization.nonce as Hex,
        Number(v ?? BigInt(yParity + 27)),
        r,
        s,
      ] as const,
    };
  } catch {
    return undefined; // malformed: x402's verification says how
  }
}

/**
 * Payments this facilitator has verified (plain ECDSA signatures of accounts without code), each
 * remembered once for its settlement. x402's settle verifies a payment again before it moves money:
 * the signature is recovered (pure-JS secp256k1, 2 ms of CPU here) and the payer's code read twice.
 * Nothing of that can have changed since this process's own verify: the signature covers every field
 * of the authorization, which the key binds exactly; only time moves, and settleVerified checks the
 * window again. The token checks the signature on chain either way.
 */
class VerifiedPayments {
  /** By verifiedKey: the authorization's validBefore, and its transfer as the simulation ran it. */
  private readonly entries = new Map<string, { validBefore: number; call: TransferCall }>();

  constructor(private readonly clock: Clock) {}

  /**
   * Remembers a payment verified here, with `call`, its transfer as simulated (built again when
   * absent): the settlement sends that very call, its addresses and signature decoded once.
   */
  remember(payload: PaymentPayload, requirements: PaymentRequirements, call?: TransferCall): void {
    const key = verifiedKey(payload, requirements);
    const transfer = call ?? transferCall(payload, requirements);
    if (!key || !transfer) return;
    if (this.entries.size >= MAX_REMEMBERED) this.forgetExpired();
    if (this.entries.size >= MAX_REMEMBERED) return;
    const { authorization } = payload.payload as unknown as ExactEIP3009Payload;
    this.entries.set(key, { validBefore: Number(authorization.validBefore), call: transfer });
  }

  /** The transfer of a payment verified here, left for `take`. */
  peek(payload: PaymentPayload, requirements: PaymentRequirements): TransferCall | undefined {
    const key = verifiedKey(payload, requirements);
    return key === undefined ? undefined : this.entries.get(key)?.call;
  }

  /**
   * The transfer of a payment verified here, or undefined (it is then forgotten: one settlement per
   * verification).
   */
  take(payload: PaymentPayload, requirements: PaymentRequirements): TransferCall | undefined {
    const key = verifiedKey(payload, requirements);
    if (key === undefined) return undefined;
    const entry = this.entries.get(key);
    this.entries.delete(key);
    return entry?.call;
  }

  private forgetExpired(): void {
    const now = this.clock.now().getTime() / 1000;
    for (const [key, { validBefore }] of this.entries) if (validBefore < now) this.entries.delete(key);
  }
}

/** Everything settlement depends on, or undefined for what takes x402's full path (ERC-6492, ERC-1271). */
function verifiedKey(payload: PaymentPayload, requirements: PaymentRequirements): string | undefined {
  const { authorization, signature } = ecdsaAuthorization(payload) ?? {};
  if (!authorization || !signature) return undefined;
  const { from, to, value, validAfter, validBefore, nonce } = authorization;
  const { scheme, network, asset, amount, payTo, extra } = requirements;
  return JSON.stringify([
    signature,
    from,
    to,
    value,
    validAfter,
    validBefore,
    nonce,
    payload.accepted.scheme,
    payload.accepted.network,
    scheme,
    network,
    asset,
    amount,
    payTo,
    extra?.name,
    extra?.version,
  ]);
}

/**
 * Sends the EIP-3009 transfer of a payment verified here and checks its receipt as x402's settle
 * does (status, then the Transfer event). Undefined, for x402's path to settle or refuse it, when
 * it was refused before a transaction left, reverted, or the node does not know EIP-7966's
 * eth_sendRawTransactionSync.
 */
async function settleVerified(context: {
  /** The transaction, signed ahead by `prepare` (with its nonce), or undefined: signed here. */
  signed: SignedSettlement | undefined;
  payload: PaymentPayload;
  requirements: PaymentRequirements;
  /** The payment's transfer, as its verification simulated it. */
  call: TransferCall;
  wallet: WalletClient;
  account: PrivateKeyAccount;
  clock: Clock;
  gas: bigint;
  /** Fees to offer; read from the node when absent. */
  fees: FeeValuesEIP1559 | undefined;
  /** Called when the node lacks eth_sendRawTransactionSync: later settlements take x402's path. */
  noSync: () => void;
  /** Called when the node refused the transaction (the fees offered may be too low now). */
  refused: () => void;
}): Promise<SettleResponse | undefined> {
  const { payload, requirements, call, wallet, account, gas, fees } = context;
  const { authorization } = payload.payload as unknown as ExactEIP3009Payload;
  if (!settlesInTime(authorization.validBefore, nowSeconds(context.clock))) return undefined;
  // No estimate: the node would run the transfer a dozen times (2.4 ms of anvil's CPU, the largest
  // wait of a settlement), and verify() simulated it moments ago. With the fees known and the chain
  // id given (viem passes it on to its preparation, which types it), viem fills nothing through the
  // node: eth_fillTransaction would be one more round trip before the send.
  const request = {
    ...call,
    account,
    chain: wallet.chain,
    chainId: wallet.chain?.id,
    gas,
    ...(fees ? { maxFeePerGas: fees.maxFeePerGas, maxPriorityFeePerGas: fees.maxPriorityFeePerGas } : {}),
  };
  let receipt: TransactionReceipt;
  try {
    // EIP-7966: the node answers with the receipt, one round trip instead of a wait and a poll. No
    // timeout parameter: the node's own applies (anvil accepts none), then viem waits up to 5 s more.
    receipt = context.signed
      ? await sendSigned(wallet, context.signed)
      : await wallet.writeContractSync(request);
  } catch (err) {
    // Sent, but its receipt not seen in time: pending (the rail then asks the chain by the
    // authorization's nonce, the retry worker again later).
    if (causedBy(err, WaitForTransactionReceiptTimeoutError)) return pendingSettlement(payload, requirements);
    if (causedBy(err, MethodNotFoundRpcError) || causedBy(err, MethodNotSupportedRpcError)) context.noSync();
    else context.refused();
    // Most likely refused before it left. Should it have left after all, the chain refuses the
    // authorization's reuse when x402's path sends it again: that costs gas, never a second charge.
    return undefined;
  }
  return settlementOf(receipt, call, payload, requirements);
}

/** The settlement failure of a process that holds no settling account now (a retry, never a refusal). */
const noAccount = (requirements: PaymentRequirements): SettleResponse => ({
  success: false,
  errorReason: NO_ACCOUNT,
  transaction: '',
  network: requirements.network,
});

/** A settlement sent whose receipt was not seen in time. */
function pendingSettlement(payload: PaymentPayload, requirements: PaymentRequirements): SettleResponse {
  const payer = (payload.payload as unknown as ExactEIP3009Payload).authorization.from;
  return {
    success: false,
    errorReason: 'settlement_pending',
    transaction: '',
    network: requirements.network,
    payer,
  };
}

/**
 * What a settlement's receipt shows, checked as x402's settle checks it (status, then the Transfer
 * event): undefined when it reverted.
 */
function settlementOf(
  receipt: TransactionReceipt,
  call: TransferCall,
  payload: PaymentPayload,
  requirements: PaymentRequirements,
): SettleResponse | undefined {
  const { authorization } = payload.payload as unknown as ExactEIP3009Payload;
  const network = requirements.network;
  const payer = authorization.from;
  const transaction = receipt.transactionHash;
  // Reverted: the payer spent the funds or cancelled the authorization since verify (the gas is
  // lost either way). x402's path then fails it in its estimate, with the precise reason.
  if (receipt.status !== 'success') return undefined;
  const transferred = parseEventLogs({
    abi: transferWithAuthorization,
    logs: receipt.logs,
    eventName: 'Transfer',
  }).some(
    (log) =>
      isAddressEqual(log.address, call.address) &&
      isAddressEqual(log.args.from, authorization.from as Address) &&
      isAddressEqual(log.args.to, authorization.to as Address) &&
      log.args.value === BigInt(authorization.value),
  );
  if (!transferred)
    return {
      success: false,
      errorReason: 'invalid_exact_evm_transfer_event_mismatch',
      transaction,
      network,
      payer,
    };
  return { success: true, transaction, network, payer };
}

/** A settlement transaction signed ahead of its send (see `Facilitator.prepare`). */
interface SignedSettlement {
  serialized: Hex;
  nonce: number;
  fees: FeeValuesEIP1559;
  settler: Settler;
  /** Set as it is handed to the node: from then on its nonce is the node's to keep or refuse. */
  sent: boolean;
}

/** A settlement signed ahead and not taken within this is filled (see Presigned.sweep). */
const UNTAKEN_MS = 60_000;

/** How long the receipt of a sent settlement is awaited once the node stopped waiting (as viem's own). */
const RECEIPT_FALLBACK_MS = 5_000;

/**
 * Settlement transactions signed while the host writes the `settling` mark, by payment (verifiedKey).
 * The signature (noble secp256k1 and RFC 6979, ~0.5 ms of CPU) then runs while the database writes,
 * not after: the transaction leaves only in `settle`, once the mark is written. Each takes and holds
 * the next transaction nonce of its account when signed (LocalNonces.hold: not handed out again
 * until the node answered its send); one never sent is filled (`fill`) by an empty transaction with
 * that nonce, never by the transfer.
 */
class Presigned {
  private readonly entries = new Map<string, { signed: Promise<SignedSettlement | undefined>; at: number }>();

  constructor(private readonly clock: Clock) {}

  sign(
    key: string,
    settler: Settler,
    call: TransferCall,
    gas: bigint,
    currentFees: () => Promise<FeeValuesEIP1559>,
  ): Promise<SignedSettlement | undefined> {
    const { account, wallet, nonces } = settler;
    const chainId = wallet.chain?.id;
    // After the current turn: the host's write is on its way to the database first.
    const signed = new Promise((resolve) => setImmediate(resolve))
      .then(async (): Promise<SignedSettlement | undefined> => {
        if (chainId === undefined) return undefined;
        const fees = await currentFees();
        const nonce = await nonces.hold({ address: account.address, chainId, client: wallet });
        try {
          const serialized = await account.signTransaction({
            type: 'eip1559',
            chainId,
            nonce,
            to: call.address,
            data: encodeFunctionData(call),
            gas,
            maxFeePerGas: fees.maxFeePerGas,
            maxPriorityFeePerGas: fees.maxPriorityFeePerGas,
          });
          return { serialized, nonce, fees, settler, sent: false };
        } catch {
          nonces.release({ address: account.address, chainId }, nonce);
          nonces.reset({ address: account.address, chainId });
          return undefined;
        }
      })
      .catch(() => undefined);
    this.sweep();
    this.entries.set(key, { signed, at: this.clock.now().getTime() });
    return signed;
  }

  /** The transaction signed for `key` (forgotten here), if it was signed from `settler`'s account. */
  async take(key: string | undefined, settler: Settler): Promise<SignedSettlement | undefined> {
    this.sweep();
    if (key === undefined) return undefined;
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    this.entries.delete(key);
    const found = await entry.signed;
    if (!found || found.settler === settler) return found;
    // Another account's (its lease lost meanwhile): its nonce is that account's holder's to use.
    answered(found);
    return undefined;
  }

  /** The host did not write the mark: the transfer is never sent, and its nonce is filled. */
  discard(key: string, signed: Promise<SignedSettlement | undefined>): void {
    if (this.entries.get(key)?.signed !== signed) return;
    this.entries.delete(key);
    void signed.then((found) => found && this.fill(found));
  }

  /**
   * Discards what was signed and left untaken for UNTAKEN_MS: a settlement is taken moments after it
   * is signed, so one left that long never will be here (its settlement failed before reaching the
   * rail, or another replica's retry worker settles it), and its held nonce would leave a gap.
   */
  private sweep(): void {
    const before = this.clock.now().getTime() - UNTAKEN_MS;
    for (const [key, { signed, at }] of this.entries) if (at < before) this.discard(key, signed);
  }

  /** Spends the nonce of a transaction never sent on an empty transaction to the account itself. */
  fill(signed: SignedSettlement): void {
    const { account, wallet } = signed.settler;
    signed.sent = true;
    void wallet
      .sendTransaction({
        account,
        chain: wallet.chain,
        to: account.address,
        value: 0n,
        nonce: signed.nonce,
        gas: 21_000n,
        maxFeePerGas: signed.fees.maxFeePerGas,
        maxPriorityFeePerGas: signed.fees.maxPriorityFeePerGas,
      })
      .catch(() => undefined)
      .finally(() => answered(signed));
  }
}

/** The node answered the send of a transaction signed ahead: the chain counts its nonce now, or it was refused. */
function answered({ nonce, settler: { account, wallet, nonces } }: SignedSettlement): void {
  const chainId = wallet.chain?.id;
  if (chainId !== undefined) nonces.release({ address: account.address, chainId }, nonce);
}

/**
 * Sends a settlement signed ahead with EIP-7966's eth_sendRawTransactionSync, as viem's
 * writeContractSync sends one it signs: refused, the account's nonces are read again; accepted but
 * not yet mined when the node stopped waiting, its receipt is awaited by hash.
 */
async function sendSigned(wallet: WalletClient, signed: SignedSettlement): Promise<TransactionReceipt> {
  signed.sent = true;
  try {
    return await sendRawTransactionSync(wallet, { serializedTransaction: signed.serialized });
  } catch (err) {
    const accepted =
      err instanceof BaseError && err.walk((cause) => (cause as { code?: unknown }).code === 4);
    if (!accepted) {
      forgetNonces(signed.settler);
      throw err;
    }
  } finally {
    answered(signed);
  }
  return await waitForTransactionReceipt(wallet, {
    hash: keccak256(signed.serialized),
    timeout: RECEIPT_FALLBACK_MS,
    checkReplacement: false,
  });
}

/**
 * Sends a settlement signed ahead with eth_sendRawTransaction: its hash, once the node accepted it
 * (not yet mined). Refused, the account's nonces are read again.
 */
async function sendAhead(wallet: WalletClient, signed: SignedSettlement): Promise<Hex> {
  signed.sent = true;
  try {
    return await sendRawTransaction(wallet, { serializedTransaction: signed.serialized });
  } catch (err) {
    forgetNonces(signed.settler);
    throw err;
  } finally {
    answered(signed);
  }
}

/** How long a settlement's receipt is awaited by hash; then the retry worker asks the chain by its nonce. */
const RECEIPT_WAIT_MS = 30_000;

/**
 * The receipt of `hash` itself, for x402's settlement. viem answers the wait for a transaction that
 * another of its account's transactions replaced (its nonce reused) with the replacement's receipt,
 * and x402 then checks that receipt's Transfer: another payment's transfer from the same payer to the
 * same payee passes, and this payment would be recorded settled with nothing moved. A replaced
 * settlement is a failure to wait on instead (x402 answers it pending, and the rail asks the chain).
 */
async function receiptOfOwn(
  publicClient: PublicClient,
  hash: Hex,
  replaced: Set<string>,
): Promise<TransactionReceipt> {
  const receipt = await publicClient.waitForTransactionReceipt({ hash, timeout: RECEIPT_WAIT_MS });
  if (receipt.transactionHash.toLowerCase() === hash.toLowerCase()) return receipt;
  replaced.add(hash.toLowerCase());
  throw new Error(`settlement transaction ${hash} was replaced by ${receipt.transactionHash}`);
}

/**
 * x402's store of settlements sent and not yet confirmed, by payment (its next settle waits for the
 * transaction kept here instead of sending another), but for a transaction seen replaced: that one
 * will never be mined, and the payment's next settle sends its transfer anew.
 */
class PendingUnlessReplaced extends InMemoryPendingSettlementStore {
  constructor(private readonly replaced: Set<string>) {
    super();
  }

  override async set(key: string, txHash: string): Promise<void> {
    if (this.replaced.delete(txHash.toLowerCase())) return this.delete(key);
    return super.set(key, txHash);
  }
}

/** A send refused: the account's next nonce is read from the chain again, not counted on. */
function forgetNonces({ account, wallet, nonces }: Settler): void {
  const chainId = wallet.chain?.id;
  if (chainId !== undefined) nonces.reset({ address: account.address, chainId });
}
