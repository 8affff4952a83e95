import assert from 'node:assert/strict';
import { pino } from 'pino';
import { createPublicClient, http, parseAbi } from 'viem';
import { chainFloor } from '../../bench/payments-floor.ts';
import { startDevChain, type DevChain } from '../../devchain/index.ts';

const balanceOf = parseAbi(['function balanceOf(address account) view returns (uint256)']);

/**
 * The payments suite's chain floor: each timed send is a real settlement transfer (the amount moves,
 * one transaction mined per send), paid from the runtime wallet and never from the suite's payer.
 */
describe('bench: the chain floor of a paid call', () => {
  let chain: DevChain;
  before(async () => {
    chain = await startDevChain({ logger: pino({ level: 'silent' }) });
  });
  after(async () => {
    await chain.stop();
  });

  it('sends each pre-signed transferWithAuthorization alone and it moves the amount', async () => {
    const client = createPublicClient({ transport: http(chain.rpcUrl) });
    const read = (account: `0x${string}`) =>
      client.readContract({
        address: chain.token.address,
        abi: balanceOf,
        functionName: 'balanceOf',
        args: [account],
      });
    const payerBefore = await read(chain.accounts.payer.address);
    const sentBefore = await client.getTransactionCount({ address: chain.accounts.runtime.address });
    const floor = chainFloor(chain, 500n, () => 0);
    try {
      const first = await floor.run(5, 2);
      const second = await floor.run(3, 0);
      assert.equal(first.failed + second.failed, 0);
      assert.equal(first.calls, 5);
      assert.ok(first.p50Ms > 0 && first.p99Ms >= first.p50Ms);
    } finally {
      await floor.close();
    }
    assert.equal(await read(floor.to), 500n * 10n);
    assert.equal(
      await client.getTransactionCount({ address: chain.accounts.runtime.address }),
      sentBefore + 10,
    );
    assert.equal(await read(chain.accounts.payer.address), payerBefore);
  });
});
