import { expect } from 'chai';
import { blockRanges, blockRangesBackwards } from '@sigil/plugin-api/chain';

const list = (ranges: Iterable<{ fromBlock: bigint; toBlock: bigint }>) =>
  [...ranges].map(({ fromBlock, toBlock }) => [Number(fromBlock), Number(toBlock)]);

describe('block ranges for eth_getLogs', () => {
  it('cover from…to inclusively in ranges of at most `span` blocks, oldest first', () => {
    expect(list(blockRanges(10n, 24n, 5n))).to.deep.equal([
      [10, 14],
      [15, 19],
      [20, 24],
    ]);
    expect(list(blockRanges(10n, 22n, 5n))).to.deep.equal([
      [10, 14],
      [15, 19],
      [20, 22],
    ]);
    expect(list(blockRanges(7n, 7n, 2000n))).to.deep.equal([[7, 7]]);
    expect(list(blockRanges(0n, 2n, 1n))).to.deep.equal([
      [0, 0],
      [1, 1],
      [2, 2],
    ]);
  });

  it('newest first, the oldest range cut at `from`', () => {
    expect(list(blockRangesBackwards(10n, 22n, 5n))).to.deep.equal([
      [18, 22],
      [13, 17],
      [10, 12],
    ]);
    expect(list(blockRangesBackwards(0n, 0n, 5n))).to.deep.equal([[0, 0]]);
  });

  it('are empty when from is past to, and refuse a span under one block', () => {
    expect(list(blockRanges(5n, 4n))).to.deep.equal([]);
    expect(list(blockRangesBackwards(5n, 4n))).to.deep.equal([]);
    expect(() => list(blockRanges(0n, 10n, 0n))).to.throw(RangeError);
    expect(() => list(blockRangesBackwards(0n, 10n, 0n))).to.throw(RangeError);
  });
});
