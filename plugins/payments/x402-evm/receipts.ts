import {
  MethodNotFoundRpcError,
  MethodNotSupportedRpcError,
  TransactionReceiptNotFoundError,
  WaitForTransactionReceiptTimeoutError,
  type Hex,
  type PublicClient,
  type TransactionReceipt,
} from 'viem';
import { getBlockNumber, getBlockReceipts, getTransactionReceipt } from 'viem/actions';
import { causedBy } from './transport.ts';

/** Blocks read in one look at most (a node that fell behind is caught up over several). */
const MAX_BLOCKS_A_LOOK = 32n;

interface Waiter {
  receipt: Promise<TransactionReceipt>;
  resolve(receipt: TransactionReceipt): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

/**
 * Receipts of settlements sent ahead (answerAfter "broadcast"), awaited together: every
 * `pollingIntervalMs`, the blocks mined since the last look are read once each
 * (eth_getBlockReceipts), whatever the number of settlements waiting. viem's
 * waitForTransactionReceipt asks for each waiting transaction's receipt on every new block: at 200
 * settlements in flight that was most of the gateway's CPU a paid call. A node without
 * eth_getBlockReceipts is asked for each waiting receipt instead, as viem does.
 */
export class ReceiptWatch {
  private readonly waiting = new Map<string, Waiter>();
  /** The last block whose receipts were read; undefined until the first look. */
  private scanned: bigint | undefined;
  private timer: NodeJS.Timeout | undefined;
  private byBlock = true;

  constructor(
    private readonly client: PublicClient,
    private readonly pollingIntervalMs: number,
  ) {}

  /** The receipt of `hash` once mined; WaitForTransactionReceiptTimeoutError after `timeoutMs`. */
  wait(hash: Hex, timeoutMs: number): Promise<TransactionReceipt> {
    const key = hash.toLowerCase();
    const waiting = this.waiting.get(key);
    if (waiting) return waiting.receipt;
    let waiter!: Omit<Waiter, 'receipt'>;
    const receipt = new Promise<TransactionReceipt>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(key);
        reject(new WaitForTransactionReceiptTimeoutError({ hash }));
      }, timeoutMs);
      waiter = { resolve, reject, timer };
    });
    this.waiting.set(key, { ...waiter, receipt });
    // Asked once now, after it waits: mined in a block already read, it is found here; mined
    // later, in a block a later look reads (blocks are read whole, so none is read in part).
    this.askFor(hash).catch(() => undefined);
    this.timer ??= setTimeout(() => void this.look(), this.pollingIntervalMs);
    return receipt;
  }

  /** Stops looking; settlements still waiting are answered with a timeout. */
  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    for (const [key, waiter] of this.waiting) {
      clearTimeout(waiter.timer);
      waiter.reject(new WaitForTransactionReceiptTimeoutError({ hash: key as Hex }));
    }
    this.waiting.clear();
  }

  private async look(): Promise<void> {
    try {
      if (!this.byBlock) await this.askForEach();
      else if (this.scanned === undefined) {
        // The first look: what was mined up to the head is asked for one by one, later blocks are read.
        const head = await getBlockNumber(this.client, { cacheTime: 0 });
        await this.askForEach();
        this.scanned = head;
      } else await this.readNewBlocks(this.scanned);
    } catch (err) {
      // A node without eth_getBlockReceipts: each waiting receipt is asked for from now on.
      if (causedBy(err, MethodNotFoundRpcError) || causedBy(err, MethodNotSupportedRpcError))
        this.byBlock = false;
      // Otherwise (the node unreachable a moment) the next look tries again.
    }
    if (this.waiting.size > 0) this.timer = setTimeout(() => void this.look(), this.pollingIntervalMs);
    else this.timer = this.scanned = undefined;
  }

  /** Reads the blocks after `scanned` up to the head (at most MAX_BLOCKS_A_LOOK of them, together). */
  private async readNewBlocks(scanned: bigint): Promise<void> {
    const head = await getBlockNumber(this.client, { cacheTime: 0 });
    const last = head - scanned > MAX_BLOCKS_A_LOOK ? scanned + MAX_BLOCKS_A_LOOK : head;
    const numbers: bigint[] = [];
    for (let block = scanned + 1n; block <= last; block++) numbers.push(block);
    const blocks = await Promise.all(
      numbers.map((blockNumber) => getBlockReceipts(this.client, { blockNumber })),
    );
    for (const receipts of blocks) for (const receipt of receipts) this.settle(receipt);
    this.scanned = last;
  }

  private async askForEach(): Promise<void> {
    await Promise.all([...this.waiting.keys()].map((hash) => this.askFor(hash as Hex)));
  }

  private async askFor(hash: Hex): Promise<void> {
    const found = await this.receiptOf(hash);
    if (found) this.settle(found);
  }

  private receiptOf(hash: Hex): Promise<TransactionReceipt | undefined> {
    return getTransactionReceipt(this.client, { hash }).catch((err: unknown) => {
      if (err instanceof TransactionReceiptNotFoundError) return undefined;
      throw err;
    });
  }

  private settle(receipt: TransactionReceipt): void {
    const key = receipt.transactionHash.toLowerCase();
    const waiter = this.waiting.get(key);
    if (!waiter) return;
    this.waiting.delete(key);
    clearTimeout(waiter.timer);
    waiter.resolve(receipt);
  }
}
