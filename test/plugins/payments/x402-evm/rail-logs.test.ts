import type { PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import { configSchema, X402EvmRail } from '../../../../plugins/payments/x402-evm/index.ts';
import {
  chainBehindProxy,
  devAccountKey,
  payingClient,
  railPlugin,
} from '../../../services/gateway/payments/support.ts';
import { systemClock } from '../../../../core/clock.ts';

/**
 * The rail reads the chain's logs in ranges of `logBlockRange` blocks, as hosted RPC endpoints
 * demand. A used nonce alone is no settlement (the payer's cancelAuthorization uses it too): while the
 * logs that say how it was used are refused, the rail cannot tell, and settle() answers retry.
 */
describe('payments-x402-evm: log reads in block ranges, on anvil', function () {
  this.timeout(60_000);
  const world = chainBehindProxy();

  it('finds every settlement and its transaction with a range of one block, and answers retry for a used authorization while logs are refused', async () => {
    const { plugin } = railPlugin(world.chain, {
      rpcUrl: world.proxy.url,
      logBlockRange: 1,
      facilitator: { kind: 'builtin', privateKey: devAccountKey(7) },
    });
    const rail = new X402EvmRail(configSchema.parse(plugin.options), { clock: systemClock });
    const required = rail.paymentRequired({ url: 'test://logs', description: 'logs' }) as PaymentRequired;
    const payments = [];
    for (let i = 0; i < 3; i++) {
      const verified = await rail.verify(await payingClient(world.chain).createPaymentPayload(required));
      if (!verified.valid) throw new Error(`not verified: ${verified.reason}`);
      const settled = await rail.settle(verified.payment);
      if (settled.status !== 'settled') throw new Error(JSON.stringify(settled));
      payments.push({ payment: verified.payment, transaction: settled.transaction });
    }
    const onChain = await rail.settlementsOnChain(0n);
    expect(onChain.map((settlement) => settlement.id).sort()).to.deep.equal(
      payments.map(({ payment }) => payment.id).sort(),
    );
    // Three anvil blocks apart at least: one range per block read them.
    expect(new Set(onChain.map((settlement) => settlement.block)).size).to.equal(3);
    for (const { payment, transaction } of payments) {
      expect(await rail.status(payment)).to.deep.equal({ used: true, transaction });
    }

    world.proxy.intercept = (methods) => (methods.includes('eth_getLogs') ? 'cut' : 'forward');
    const first = payments[0]!;
    const unreadable = await rail.status(first.payment).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(unreadable, 'status() could not tell').to.be.instanceOf(Error);
    expect(await rail.settle(first.payment)).to.include({ status: 'retry', authorizationUsed: true });
    world.proxy.intercept = undefined;
    expect(await rail.settle(first.payment)).to.deep.equal({
      status: 'settled',
      transaction: first.transaction,
      payer: first.payment.payer,
    });
    await rail.stop();
  });
});
