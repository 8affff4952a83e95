import {
  createPublicClient,
  createWalletClient,
  defineChain,
  encodeFunctionData,
  http,
  parseAbi,
  type Address,
  type Hex,
  type Log,
  type PublicClient,
  type WalletClient,
} from 'viem';
import { privateKeyToAccount, type LocalAccount } from 'viem/accounts';
import { blockRanges } from '@sigil/plugin-api/chain';
import { signedTransaction, type SignedTransaction } from './signed-transaction.ts';

export const ledgerTokenAbi = parseAbi([
  'function name() view returns (string)',
  'function version() view returns (string)',
  'function balanceOf(address account) view returns (uint256)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)',
  'function cancelAuthorization(address authorizer, bytes32 nonce, bytes signature)',
  'event Transfer(address indexed from, address indexed to, uint256 value)',
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
  'event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce)',
]);

const TRANSFER_EVENT = ledgerTokenAbi.find((item) => item.type === 'event' && item.name === 'Transfer');
const USED_EVENT = ledgerTokenAbi.find((item) => item.type === 'event' && item.name === 'AuthorizationUsed');
const CANCELED_EVENT = ledgerTokenAbi.find(
  (item) => item.type === 'event' && item.name === 'AuthorizationCanceled',
);

/** EIP-3009 typed data, as USDC (FiatToken v2) and the dev chain's SigilDollar define it. */
export const TRANSFER_WITH_AUTHORIZATION_TYPES = {
  TransferWithAuthorization: [
    { name: 'from', type: 'address' },
    { name: 'to', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'validAfter', type: 'uint256' },
    { name: 'validBefore', type: 'uint256' },
    { name: 'nonce', type: 'bytes32' },
  ],
} as const;

export const CANCEL_AUTHORIZATION_TYPES = {
  CancelAuthorization: [
    { name: 'authorizer', type: 'address' },
    { name: 'nonce', type: 'bytes32' },
  ],
} as const;

export interface TokenTransfer {
  from: Address;
  to: Address;
  value: bigint;
  blockNumber: bigint;
  transactionHash: Hex;
  logIndex: number;
}

export interface LedgerChainOptions {
  rpcUrl: string;
  chainId: number;
  token: Address;
  operatorKey: Hex;
  /** Blocks before a transfer counts; the block that includes it is the first. */
  confirmations: number;
  /** Polling interval of viem's receipt waits. */
  pollingIntervalMs?: number;
}

/** Largest address list one eth_getLogs asks for (public RPCs cap it, as they cap block ranges). */
const LOG_ADDRESS_CHUNK = 100;

/**
 * The ledger's view of the chain: confirmed reads of the token, and transactions the operator account
 * submits (and pays gas for) on behalf of deposit addresses, which only ever sign EIP-3009 messages.
 */
export class LedgerChain {
  readonly publicClient: PublicClient;
  readonly operator: LocalAccount;
  private readonly wallet: WalletClient;
  private domainPromise: Promise<{ name: string; version: string }> | undefined;

  constructor(readonly options: LedgerChainOptions) {
    const chain = defineChain({
      id: options.chainId,
      name: `chain ${options.chainId}`,
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [options.rpcUrl] } },
    });
    const transport = http(options.rpcUrl, { retryCount: 0, timeout: 10_000 });
    this.publicClient = createPublicClient({
      chain,
      transport,
      pollingInterval: options.pollingIntervalMs ?? 1000,
    });
    this.operator = privateKeyToAccount(options.operatorKey);
    this.wallet = createWalletClient({ chain, transport, account: this.operator });
  }

  get token(): Address {
    return this.options.token;
  }

  /** The newest block, and the newest with enough confirmations (latest − confirmations + 1). */
  async head(): Promise<{ latest: bigint; confirmed: bigint }> {
    const latest = await this.publicClient.getBlockNumber({ cacheTime: 0 });
    const confirmed = latest - BigInt(this.options.confirmations - 1);
    return { latest, confirmed: confirmed < 0n ? -1n : confirmed };
  }

  async blockTimestamp(block: bigint): Promise<bigint> {
    return (await this.publicClient.getBlock({ blockNumber: block })).timestamp;
  }

  async balanceOf(account: Address, block: bigint): Promise<bigint> {
    return this.publicClient.readContract({
      address: this.token,
      abi: ledgerTokenAbi,
      functionName: 'balanceOf',
      args: [account],
      blockNumber: block,
    });
  }

  /** Token transfers to or from any of `accounts` in blocks `from`…`to` (inclusive). */
  async transfers(accounts: readonly Address[], from: bigint, to: bigint): Promise<TokenTransfer[]> {
    const found = new Map<string, TokenTransfer>();
    for (const range of blockRanges(from, to)) {
      for (let i = 0; i < accounts.length; i += LOG_ADDRESS_CHUNK) {
        const chunk = accounts.slice(i, i + LOG_ADDRESS_CHUNK) as Address[];
        for (const args of [{ to: chunk }, { from: chunk }]) {
          const logs = await this.publicClient.getLogs({
            address: this.token,
            event: TRANSFER_EVENT as NonNullable<typeof TRANSFER_EVENT>,
            args,
            ...range,
          });
          for (const log of logs) {
            const transfer = transferOf(log);
            if (transfer) found.set(`${transfer.transactionHash}:${transfer.logIndex}`, transfer);
          }
        }
      }
    }
    return [...found.values()].sort((a, b) =>
      a.blockNumber === b.blockNumber ? a.logIndex - b.logIndex : a.blockNumber < b.blockNumber ? -1 : 1,
    );
  }

  /** The token's EIP-712 name and version (read once). */
  domain(): Promise<{ name: string; version: string; chainId: number; verifyingContract: Address }> {
    this.domainPromise ??= Promise.all([
      this.publicClient.readContract({ address: this.token, abi: ledgerTokenAbi, functionName: 'name' }),
      this.publicClient.readContract({ address: this.token, abi: ledgerTokenAbi, functionName: 'version' }),
    ]).then(([name, version]) => ({ name, version }));
    this.domainPromise.catch(() => (this.domainPromise = undefined));
    return this.domainPromise.then((d) => ({
      ...d,
      chainId: this.options.chainId,
      verifyingContract: this.token,
    }));
  }

  /** Whether the authorization was used or canceled, as of `block` (the latest by default). */
  async authorizationState(authorizer: Address, nonce: Hex, block?: bigint): Promise<boolean> {
    return this.publicClient.readContract({
      address: this.token,
      abi: ledgerTokenAbi,
      functionName: 'authorizationState',
      args: [authorizer, nonce],
      ...(block === undefined ? {} : { blockNumber: block }),
    });
  }

  /** How an authorization ended on chain, from its AuthorizationUsed or AuthorizationCanceled event. */
  async authorizationOutcome(
    authorizer: Address,
    nonce: Hex,
    fromBlock: bigint,
  ): Promise<{ outcome: 'used' | 'canceled'; transactionHash: Hex; blockNumber: bigint } | undefined> {
    const { latest } = await this.head();
    for (const [outcome, event] of [
      ['used', USED_EVENT],
      ['canceled', CANCELED_EVENT],
    ] as const) {
      for (const range of blockRanges(fromBlock, latest)) {
        const logs = await this.publicClient.getLogs({
          address: this.token,
          event: event as NonNullable<typeof USED_EVENT>,
          args: { authorizer, nonce },
          ...range,
        });
        const log = logs[0];
        if (log?.transactionHash && log.blockNumber !== null) {
          return { outcome, transactionHash: log.transactionHash, blockNumber: log.blockNumber };
        }
      }
    }
    return undefined;
  }

  /**
   * Signs, without sending, the operator's transferWithAuthorization of a deposit key's signed
   * authorization, at the account's next nonce (the chain's pending count). Throws a revert when the
   * transfer would revert now (its gas estimate fails).
   */
  signTransfer(authorization: {
    from: Address;
    to: Address;
    value: bigint;
    validAfter: bigint;
    validBefore: bigint;
    nonce: Hex;
    signature: Hex;
  }): Promise<SignedTransaction> {
    const { from, to, value, validAfter, validBefore, nonce, signature } = authorization;
    return this.sign(
      encodeFunctionData({
        abi: ledgerTokenAbi,
        functionName: 'transferWithAuthorization',
        args: [from, to, value, validAfter, validBefore, nonce, signature],
      }),
    );
  }

  /** Signs, without sending, the operator's cancelAuthorization, so an unused authorization can never move money. */
  signCancel(authorizer: Address, nonce: Hex, signature: Hex): Promise<SignedTransaction> {
    return this.sign(
      encodeFunctionData({
        abi: ledgerTokenAbi,
        functionName: 'cancelAuthorization',
        args: [authorizer, nonce, signature],
      }),
    );
  }

  /**
   * Sends a signed transaction, as often as asked: the same bytes are the same transaction, so a
   * node that already has it (pending or mined) adds nothing.
   */
  async broadcast(signed: SignedTransaction): Promise<void> {
    try {
      await this.publicClient.sendRawTransaction({ serializedTransaction: signed.raw });
    } catch (err) {
      if (!(await this.known(signed.hash))) throw err;
    }
  }

  /**
   * Whether a signed transaction can never be mined: it is not, and the operator account's count of
   * mined transactions went past its nonce (another transaction took it). Only then is a new one signed.
   */
  async superseded(signed: SignedTransaction): Promise<boolean> {
    // The count first: a transaction mined after it was read shows up in the receipt read next.
    const mined = await this.publicClient.getTransactionCount({
      address: this.operator.address,
      blockTag: 'latest',
    });
    return mined > signed.nonce && (await this.receipt(signed.hash)) === undefined;
  }

  /** The receipt of a sent transaction, or undefined while it is not mined. */
  async receipt(hash: Hex): Promise<{ status: 'success' | 'reverted'; blockNumber: bigint } | undefined> {
    try {
      const receipt = await this.publicClient.getTransactionReceipt({ hash });
      return { status: receipt.status, blockNumber: receipt.blockNumber };
    } catch (err) {
      if ((err as Error).name === 'TransactionReceiptNotFoundError') return undefined;
      throw err;
    }
  }

  /** Whether a node knows the transaction (pending or mined). */
  private async known(hash: Hex): Promise<boolean> {
    try {
      await this.publicClient.getTransaction({ hash });
      return true;
    } catch (err) {
      if ((err as Error).name === 'TransactionNotFoundError') return false;
      throw err;
    }
  }

  private async sign(data: Hex): Promise<SignedTransaction> {
    const request = await this.wallet.prepareTransactionRequest({
      account: this.operator,
      chain: this.wallet.chain,
      to: this.token,
      data,
    });
    const raw = await this.wallet.signTransaction({ ...request, chain: this.wallet.chain });
    return signedTransaction(raw, request.nonce);
  }
}

function transferOf(log: Log): TokenTransfer | undefined {
  const { args } = log as Log & { args?: { from?: Address; to?: Address; value?: bigint } };
  if (
    !args?.from ||
    !args.to ||
    args.value === undefined ||
    log.blockNumber === null ||
    !log.transactionHash
  ) {
    return undefined;
  }
  return {
    from: args.from,
    to: args.to,
    value: args.value,
    blockNumber: log.blockNumber,
    transactionHash: log.transactionHash,
    logIndex: log.logIndex ?? 0,
  };
}
