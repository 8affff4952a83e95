import { decodePaymentResponseHeader } from '@x402/core/http';
import type { PaymentPayload } from '@x402/core/types';
import { expect } from 'chai';
import { createTestClient, http, parseGwei, type Hex } from 'viem';
import { chainClients } from '../../../solidity/support.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import {
  anvilWorld,
  eventually,
  paidGateway,
  pay,
  payingClient,
  sendCancelAuthorization,
  settlementRows,
  stopSharedProbeWorld,
  type PaidGateway,
  type SettlementRecord,
} from './support.ts';

after(stopSharedProbeWorld); // root level: once every file has used the shared probe world

/**
 * The x402 rail's `answerAfter: "broadcast"`: a paid call is answered once the node accepted its
 * settlement transaction, before it is mined (anvil's automine off holds it in the pool), with x402's
 * `settlement_pending` and the transaction's hash; the record is settled by that transaction once
 * mined. A payer who cancels its authorization ahead of the settlement gets that one answer unpaid,
 * and its later calls wait for the receipt.
 */
describe('payments: answered at the settlement’s broadcast (answerAfter "broadcast", anvil)', function () {
  this.timeout(120_000);
  const anvil = anvilWorld();

  describeEachDatabase('one gateway', (database) => {
    let gateway: PaidGateway;
    const chainControl = () => createTestClient({ mode: 'anvil', transport: http(anvil.chain.rpcUrl) });
    before(async () => {
      gateway = await paidGateway(anvil.world, anvil.chain, database, {
        facilitatorIndex: anvil.nextFacilitator(),
        railOptions: { answerAfter: 'broadcast' },
      });
    });
    afterEach(() => chainControl().setAutomine(true));
    after(() => gateway?.stop());

    const rowOf = async (payment: PaymentPayload): Promise<SettlementRecord | undefined> => {
      const { nonce } = (payment.payload as { authorization: { nonce: string } }).authorization;
      return (await settlementRows(gateway.records)).find((row) => row.id.endsWith(nonce.toLowerCase()));
    };
    const paidEcho = async () => {
      const payment = await pay(payingClient(anvil.chain, gateway.payer), await gateway.required());
      return { payment, answer: gateway.callRest('echo', { message: 'paid' }, payment) };
    };
    const receiptOf = (res: Response) => decodePaymentResponseHeader(res.headers.get('payment-response')!);
    const mined = (hash: string) =>
      chainClients(anvil.chain)
        .publicClient.getTransactionReceipt({ hash: hash as Hex })
        .then(
          () => true,
          () => false,
        );

    it('answers before the settlement is mined (settlement_pending with its hash); once mined, the record is settled by it and the price moved once', async () => {
      await chainControl().setAutomine(false);
      const { payment, answer } = await paidEcho();
      const res = await answer;
      expect(res.status).to.equal(200);
      expect(await res.text()).to.include('paid');
      const receipt = receiptOf(res);
      expect(receipt).to.include({ success: false, errorReason: 'settlement_pending' });
      expect(receipt.transaction).to.match(/^0x[0-9a-f]{64}$/);
      expect(await mined(receipt.transaction), 'mined before the answer').to.equal(false);
      expect((await rowOf(payment))?.state).to.equal('settling');

      await chainControl().mine({ blocks: 1 });
      const row = await eventually('the settled mark', async () => {
        const found = await rowOf(payment);
        return found?.state === 'settled' && found;
      });
      expect(row.transaction).to.equal(receipt.transaction);
      const { settled } = await gateway.expectBalanced();
      expect(settled).to.equal(BigInt(row.amount));
    });

    it('a payer who cancels its authorization ahead of the settlement: that answer goes unpaid (the record failed, nothing moved), and its next call waits for the receipt', async () => {
      const before = await gateway.expectBalanced();
      await chainControl().setAutomine(false);
      const { payment, answer } = await paidEcho();
      const res = await answer;
      expect(receiptOf(res)).to.include({ success: false, errorReason: 'settlement_pending' });
      // Mined ahead of the settlement, which then reverts: the authorization is spent.
      const fees = { maxFeePerGas: parseGwei('500'), maxPriorityFeePerGas: parseGwei('400'), gas: 200_000n };
      await sendCancelAuthorization(anvil.chain, gateway.payer, payment, fees);
      await chainControl().mine({ blocks: 1 });
      const failed = await eventually('the failed settlement', async () => {
        const found = await rowOf(payment);
        return found?.state !== 'settling' && found;
      });
      expect([failed.state, failed.transaction]).to.deep.equal(['failed', null]);

      const next = await paidEcho();
      let answered = false;
      const nextAnswer = next.answer.then((r) => ((answered = true), r));
      // Its settlement sent and waiting in the pool to be mined, the call is still unanswered.
      await eventually('the next settlement in the pool', async () => {
        const pending = await chainControl().getTxpoolContent();
        return (await rowOf(next.payment))?.state === 'settling' && Object.keys(pending.pending).length > 0;
      });
      expect(answered, 'answered before its settlement was mined').to.equal(false);
      await chainControl().mine({ blocks: 1 });
      const nextRes = await nextAnswer;
      expect(nextRes.status).to.equal(200);
      expect(receiptOf(nextRes)).to.include({ success: true });
      const after = await gateway.expectBalanced();
      expect(after.settled - before.settled, 'only the call answered after its receipt was paid').to.equal(
        BigInt(failed.amount),
      );
    });
  });
});
