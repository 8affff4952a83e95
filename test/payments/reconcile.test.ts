import { decodePaymentResponseHeader } from '@x402/core/http';
import { expect } from 'chai';
import { describeEachDatabase } from '../support/kernel.ts';
import {
  chainBehindProxy,
  paidGateway,
  payingClient,
  sharedProbeWorld,
  stopSharedProbeWorld,
  type PaidGateway,
} from './support.ts';

after(stopSharedProbeWorld); // root level: once every file has used the shared probe world

interface Report {
  checked: number;
  onChain: number;
  mismatches: { id: string; problem: string; record?: { transaction: string | null } }[];
}

/**
 * The reconciler keeps the settlements it has read from the chain and reads only the blocks since its
 * last reading, from REREAD_BLOCKS (64) back, so a reorganization within that depth is seen; a chain
 * shorter than its last reading is read again from block 0.
 */
describe('payments: incremental reconciliation, on anvil', function () {
  this.timeout(120_000);
  describeEachDatabase('one gateway', (database) => {
    const world = chainBehindProxy();
    let gateway: PaidGateway;
    before(async () => {
      gateway = await paidGateway(await sharedProbeWorld(), world.chain, database, {
        facilitatorIndex: 5,
        rpcUrl: world.proxy.url,
        // One block per log query: the number of eth_getLogs calls counts the blocks read (two each).
        railOptions: { logBlockRange: 1 },
      });
    });
    after(() => gateway?.stop());

    const anvil = async (method: string, params: unknown[] = []): Promise<unknown> => {
      const res = await fetch(world.chain.rpcUrl, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
      });
      return ((await res.json()) as { result: unknown }).result;
    };
    /** A paid call that settles; its settlement transaction. */
    const paidCall = async (): Promise<string> => {
      const payment = await payingClient(world.chain, gateway.payer).createPaymentPayload(
        await gateway.required(),
      );
      const res = await gateway.callRest('echo', { message: 'reconcile' }, payment);
      expect(res.status).to.equal(200);
      return decodePaymentResponseHeader(res.headers.get('payment-response') as string).transaction;
    };
    /** The reconciliation report, and how many blocks it read. */
    const reconcile = async (): Promise<{ report: Report; blocksRead: number }> => {
      const before = world.proxy.count('eth_getLogs');
      const res = await fetch(`${gateway.url}/api/payments/reconciliation`, {
        headers: { authorization: `Bearer ${gateway.operatorToken}` },
      });
      expect(res.status).to.equal(200);
      return {
        report: (await res.json()) as Report,
        blocksRead: (world.proxy.count('eth_getLogs') - before) / 2,
      };
    };

    it('reads only the blocks since its last reading, and keeps counting what it read before', async () => {
      await anvil('anvil_mine', ['0xc8']); // 200 empty blocks
      await paidCall();
      const first = await reconcile();
      expect(first.report).to.deep.include({ checked: 1, onChain: 1, mismatches: [] });
      expect(first.blocksRead).to.be.greaterThan(200);
      await paidCall();
      const second = await reconcile();
      expect(second.report).to.deep.include({ checked: 2, onChain: 2, mismatches: [] });
      // From 64 blocks below the last reading: the first payment's block is not read again, yet counts.
      expect(second.blocksRead).to.be.within(64, 64 + 10);
    });

    it('sees a settlement undone by a reorganization within the depth it reads again', async () => {
      const snapshot = await anvil('evm_snapshot');
      const transaction = await paidCall();
      expect((await reconcile()).report.mismatches).to.deep.equal([]);
      await anvil('evm_revert', [snapshot]);
      await anvil('anvil_mine', ['0x5']); // the chain grows past the last reading again, without it
      const { report, blocksRead } = await reconcile();
      expect(blocksRead).to.be.below(100);
      expect(report.mismatches.map((m) => [m.problem, m.record?.transaction])).to.deep.equal([
        ['settled_not_on_chain', transaction],
      ]);
    });

    it('reads a chain shorter than its last reading from block 0 again', async () => {
      const snapshot = await anvil('evm_snapshot');
      await anvil('anvil_mine', ['0x20']);
      await reconcile();
      await anvil('evm_revert', [snapshot]);
      const latest = Number(await anvil('eth_blockNumber'));
      const { report, blocksRead } = await reconcile();
      expect(blocksRead).to.equal(latest + 1);
      // Still one payment undone by the reorganization before, and the rest on chain.
      expect(report.mismatches.map((m) => m.problem)).to.deep.equal(['settled_not_on_chain']);
      expect(report.onChain).to.equal(2);
    });
  });
});
