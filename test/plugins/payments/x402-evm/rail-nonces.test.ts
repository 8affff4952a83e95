import type { PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import type { SettleOutcome } from '@sigil/plugin-api';
import { configSchema, X402EvmRail } from '../../../../plugins/payments/x402-evm/index.ts';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import {
  balances,
  devAccountKey,
  payingClient,
  railPlugin,
} from '../../../services/gateway/payments/support.ts';
import { systemClock } from '../../../../core/clock.ts';

/**
 * The built-in facilitator's transaction nonces: each rail counts its own. Two rails in one process
 * (a test run, a conformance run, a dev chain started again) may settle from the same account on
 * chains that share a chain id but not a history.
 */
describe('payments-x402-evm: transaction nonces of the built-in facilitator, on anvil', function () {
  this.timeout(60_000);
  let chains: DevChain[] = [];

  before(async () => {
    chains = await Promise.all([startDevChain(), startDevChain()]);
  });
  after(async () => {
    await Promise.all(chains.map((chain) => chain.stop()));
  });

  it('two rails on two fresh chains with the same chain id, settling from the same account: both settle at once', async () => {
    for (const chain of chains) {
      const { plugin, payTo } = railPlugin(chain, {
        facilitator: { kind: 'builtin', privateKey: devAccountKey(9) },
      });
      const rail = new X402EvmRail(configSchema.parse(plugin.options), { clock: systemClock });
      const required = rail.paymentRequired({
        url: 'test://nonces',
        description: 'nonces',
      }) as PaymentRequired;
      const verified = await rail.verify(await payingClient(chain).createPaymentPayload(required));
      if (!verified.valid) throw new Error(`not verified: ${verified.reason}`);
      // A transaction sent with a nonce the chain has not reached never mines: settle would hang.
      const outcome = await Promise.race([
        rail.settle(verified.payment),
        new Promise<SettleOutcome>((resolve) =>
          setTimeout(
            () => resolve({ status: 'retry', reason: 'hung', message: 'no receipt in 10 s' }),
            10_000,
          ),
        ),
      ]);
      await rail.stop();
      expect(outcome.status, `chain ${chain.rpcUrl}: ${JSON.stringify(outcome)}`).to.equal('settled');
      expect(await balances(chain)(payTo)).to.equal(500n);
    }
  });
});
