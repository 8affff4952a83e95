import type { PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import { privateKeyToAccount } from 'viem/accounts';
import { KitLeases } from '../../../../packages/plugin-api/src/kit/leases.ts';
import { configSchema, X402EvmRail } from '../../../../plugins/payments/x402-evm/index.ts';
import { systemClock } from '../../../../core/clock.ts';
import { recordingLogger } from '../../../support/logs.ts';
import {
  balances,
  chainBehindProxy,
  eventually,
  payingClient,
  railThroughProxy,
} from '../../../services/gateway/payments/support.ts';

/**
 * A settlement sent ahead (answerAfter "broadcast") is on its way whoever holds the settling
 * account's lease by the time it is awaited: losing the lease in between must not leave it unawaited
 * (nor its entry kept in the process for good).
 */
describe('payments-x402-evm: a settlement sent ahead, its account lease lost before it is awaited (anvil)', function () {
  this.timeout(60_000);
  const world = chainBehindProxy();

  it('is settled by its own receipt, not recovered from the chain afterwards', async () => {
    const { chain, proxy } = world;
    const { plugin, payTo, key } = railThroughProxy(world, 5, {
      answerAfter: 'broadcast',
      facilitator: { accountLeaseSeconds: 3 },
    });
    const leases = new KitLeases(() => Promise.reject(new Error('no fenced work here')));
    const { logger, lines } = recordingLogger();
    const rail = new X402EvmRail(configSchema.parse(plugin.options), {
      clock: systemClock,
      leasing: { leases, logger },
    });
    await rail.start();
    const required = rail.paymentRequired({ url: 'test://leases', description: 'leases' });
    const verified = await rail.verify(
      await payingClient(chain).createPaymentPayload(required as PaymentRequired),
    );
    if (!verified.valid) throw new Error(`not verified: ${verified.reason}`);
    rail.prepareSettlement(verified.payment);
    const sent = await rail.send(verified.payment);
    expect(sent?.transaction, 'sent ahead').to.match(/^0x[0-9a-f]{64}$/);

    // Another replica takes the account over.
    const name = `x402-evm:facilitator:${plugin.options.network as string}:${privateKeyToAccount(key).address}`;
    await leases.release({ name, holder: leases.holder, fence: 1, ttlMs: 60_000 });
    expect(await leases.acquire(name, 'another replica', 60_000), 'taken over').to.not.equal(undefined);
    // This process finds out at its next renewal (every third of the lease's 3 s).
    await eventually('the lease found lost', async () =>
      lines.some((line) => /no facilitator account free/.test(line.msg)),
    );

    proxy.reset();
    const outcome = await rail.settle(verified.payment);
    await rail.stop();
    // A settlement the facilitator could not await is looked up by its authorization's events.
    expect(proxy.count('eth_getLogs'), 'looked up on chain').to.equal(0);
    expect(outcome, JSON.stringify(outcome)).to.include({
      status: 'settled',
      transaction: sent?.transaction,
    });
    expect(await balances(chain)(payTo)).to.equal(500n);
  });
});
