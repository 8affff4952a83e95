import type { RailChainIdentity } from './index.ts';

/**
 * `@sigil/plugin-api/chain`: reading an EVM chain the way Sigil's payment rails and ledger do, for a
 * plugin that settles on one: log scans in ranges RPC endpoints accept, and the chain's identity.
 */

/**
 * Largest block range one `eth_getLogs` asks for by default: hosted RPC endpoints refuse wider ones
 * (commonly 2,000 to 10,000 blocks, some fewer), so log scans go in ranges of at most this many.
 */
export const DEFAULT_LOG_BLOCK_RANGE = 2000n;

/** Inclusive block ranges covering `from`…`to`, each at most `span` blocks, oldest first. */
export function* blockRanges(
  from: bigint,
  to: bigint,
  span: bigint = DEFAULT_LOG_BLOCK_RANGE,
): Generator<{ fromBlock: bigint; toBlock: bigint }> {
  if (span < 1n) throw new RangeError('a block range spans at least one block');
  for (let start = from; start <= to; start += span) {
    const end = start + span - 1n;
    yield { fromBlock: start, toBlock: end < to ? end : to };
  }
}

/** The same ranges, newest first: for finding something recent without reading back to `from`. */
export function* blockRangesBackwards(
  from: bigint,
  to: bigint,
  span: bigint = DEFAULT_LOG_BLOCK_RANGE,
): Generator<{ fromBlock: bigint; toBlock: bigint }> {
  if (span < 1n) throw new RangeError('a block range spans at least one block');
  for (let end = to; end >= from; end -= span) {
    const start = end - span + 1n;
    yield { fromBlock: start > from ? start : from, toBlock: end };
  }
}

/** What `readChainIdentity` reads from a chain client (viem's `PublicClient` is one). */
export interface ChainIdentitySource {
  getChainId(): Promise<number>;
  getBlock(args: { blockNumber: bigint }): Promise<{ hash: string; parentHash: string }>;
}

/**
 * The identity of the chain `client` reads, watching `contract`: what `PaymentRailV1.chainIdentity`
 * returns. Its genesis block tells a dev chain started afresh (same chain id, same contract address)
 * from the one before it. The genesis is read as block 1's parent, the block the chain grew from:
 * anvil, started again from its state file, answers for block 0 a block of its own stamped with that
 * start's time, which would make a kept chain look new. Only a chain with no block 1 yet is read at 0.
 */
export async function readChainIdentity(
  client: ChainIdentitySource,
  contract: string,
): Promise<RailChainIdentity> {
  const [chainId, first] = await Promise.all([
    client.getChainId(),
    client.getBlock({ blockNumber: 1n }).catch(() => undefined),
  ]);
  const genesisHash = first?.parentHash ?? (await client.getBlock({ blockNumber: 0n })).hash;
  return { chainId, genesisHash, contract };
}
