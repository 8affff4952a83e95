import { decodePaymentResponseHeader } from '@x402/core/http';
import { expect } from 'chai';
import { startDevChain, type DevChain } from '../../support/chain.ts';
import { describeEachDatabase } from '../../support/kernel.ts';
import {
  paidGateway,
  payingClient,
  sharedProbeWorld,
  stopSharedProbeWorld,
  type PaidGateway,
} from './payments/support.ts';
import { textOf, type ProbeWorld } from './support.ts';

after(stopSharedProbeWorld); // root level: once every file has used the shared probe world

/**
 * A paid call that runs until its time limit has failed, and the gateway spec settles no failed call
 * (part 7): it is not charged, like one that fails sooner. What keeps such calls from holding every
 * process for nothing is the caller's limit of calls in flight (call-limits.test.ts).
 */
describe('gateway: a paid call that runs until its time limit', function () {
  this.timeout(120_000);
  let world: ProbeWorld;
  let chain: DevChain;

  before(async () => {
    [world, chain] = await Promise.all([sharedProbeWorld(), startDevChain()]);
  });
  after(async () => {
    await chain?.stop();
  });

  let facilitatorIndex = 3;

  describeEachDatabase('one gateway', (database) => {
    let gateway: PaidGateway;

    before(async () => {
      gateway = await paidGateway(world, chain, database, {
        facilitatorIndex: facilitatorIndex++,
        gateway: { toolCallTimeoutSeconds: 2 },
      });
    });
    after(() => gateway?.stop());

    const paidCall = async (tool: string, args: Record<string, unknown>) => {
      const payment = await payingClient(chain, gateway.payer).createPaymentPayload(
        await gateway.required(tool),
      );
      const res = await gateway.callRest(tool, args, payment);
      return { res, body: (await res.json()) as Record<string, unknown> };
    };

    it('is not charged: the timeout is the result, with no receipt, and nothing moved', async () => {
      const { res, body } = await paidCall('sleep', { ms: 600_000 });
      expect(res.status).to.equal(200);
      expect(body.isError).to.equal(true);
      expect(textOf(body)).to.equal('Tool "sleep" timed out after 2000 ms; the server was stopped');
      expect(res.headers.get('payment-response')).to.equal(null);
      const { settled } = await gateway.expectBalanced();
      expect(settled).to.equal(0n);
    });

    it('a call that succeeds after a timed-out one (its server restarted) is charged once', async () => {
      const { res, body } = await paidCall('echo', { message: 'after the timeout' });
      expect(res.status).to.equal(200);
      expect(textOf(body)).to.equal('after the timeout');
      const receipt = decodePaymentResponseHeader(res.headers.get('payment-response') as string);
      expect(receipt.success).to.equal(true);
      const { settled } = await gateway.expectBalanced();
      expect(settled).to.equal(500n);
    });
  });
});
