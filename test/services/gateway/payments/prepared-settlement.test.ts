import type { PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import type { PaymentRailV1, VerifiedPayment } from '@sigil/plugin-api';
import { systemClock } from '../../../../core/clock.ts';
import { DatabaseLeases } from '../../../../core/db/leases.ts';
import { configSchema, X402EvmRail } from '../../../../plugins/payments/x402-evm/index.ts';
import { Payments } from '../../../../services/gateway/payments/payments.ts';
import { moveSettlement } from '../../../../services/gateway/payments/settlement-records.ts';
import type { Kernel } from '../../../../services/kernel.ts';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import { describeEachDatabase, openTestKernel, quietLogger } from '../../../support/kernel.ts';
import { balances, devAccountKey, payingClient, railPlugin } from './support.ts';

const resource = { url: 'test://prepared', description: 'prepared settlement' };

/**
 * The settlement's transaction is signed while the `settling` mark is written (the rail's
 * prepareSettlement), and leaves only after the mark committed; a mark not written (the record
 * released meanwhile) discards it: nothing is charged, and later settlements are not held behind
 * the nonce it took.
 */
describe('payments: the settlement signed while its mark is written, on anvil', function () {
  this.timeout(60_000);
  let chain: DevChain;
  before(async () => {
    chain = await startDevChain();
  });
  after(async () => {
    await chain?.stop();
  });

  describeEachDatabase('records', (database) => {
    let kernel: Kernel;
    let rail: X402EvmRail;
    let payments: Payments;
    let payTo: `0x${string}`;
    /** What the host asked of the rail, in order, with the record's state when settle was asked. */
    const asked: string[] = [];
    before(async () => {
      kernel = await openTestKernel({ database });
      const plugin = railPlugin(chain, { facilitator: { kind: 'builtin', privateKey: devAccountKey(9) } });
      payTo = plugin.payTo;
      rail = new X402EvmRail(configSchema.parse(plugin.plugin.options), { clock: systemClock });
      const stateOf = async (id: string) =>
        ((await kernel.db('payment_settlements').where({ id }).first('state')) as { state: string }).state;
      const watched = new Proxy(rail, {
        get: (target, name) => {
          if (name === 'prepareSettlement')
            return (payment: VerifiedPayment) => {
              asked.push('prepare');
              const prepared = target.prepareSettlement(payment);
              return { discard: () => (asked.push('discard'), prepared.discard()) };
            };
          if (name === 'settle')
            return async (payment: VerifiedPayment) => {
              asked.push(`settle when ${await stateOf(payment.id)}`);
              return target.settle(payment);
            };
          const value = Reflect.get(target, name) as unknown;
          return typeof value === 'function'
            ? (value as (...args: unknown[]) => unknown).bind(target)
            : value;
        },
      }) as PaymentRailV1;
      payments = new Payments({
        rail: watched,
        db: kernel.db,
        clock: systemClock,
        logger: quietLogger(),
        replica: kernel.replica,
        leases: new DatabaseLeases(kernel.db),
        leaseMs: 30_000,
        staleAfterMs: 60_000,
      });
    });
    after(async () => {
      await payments?.stop();
      await rail?.stop();
      await kernel?.close();
    });
    beforeEach(() => void asked.splice(0));
    const reserved = async () =>
      payments.reserve(
        await payingClient(chain).createPaymentPayload(rail.paymentRequired(resource) as PaymentRequired),
        resource,
        undefined,
      );

    it('signs while the mark is written and sends only once the record says settling', async () => {
      const before = await balances(chain)(payTo);
      const receipt = await payments.settle(await reserved(), resource, { content: [] });
      expect(receipt?.success, JSON.stringify(receipt)).to.equal(true);
      expect(asked).to.deep.equal(['prepare', 'settle when settling']);
      expect((await balances(chain)(payTo)) - before).to.equal(500n);
    });

    it('a mark not written (the record released meanwhile): discarded, never sent, and the next payment settles', async () => {
      const before = await balances(chain)(payTo);
      const dropped = await reserved();
      await moveSettlement({ db: kernel.db, clock: systemClock }, dropped.id, ['executing'], {
        state: 'released',
      });
      expect(await payments.settle(dropped, resource, { content: [] })).to.equal(undefined);
      expect(asked).to.deep.equal(['prepare', 'discard']);
      // The next settlement's nonce follows the discarded one's: it mines only once that one is filled.
      const receipt = await Promise.race([
        payments.settle(await reserved(), resource, { content: [] }),
        new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 10_000)),
      ]);
      expect(receipt?.success, 'settled within 10 s').to.equal(true);
      expect((await balances(chain)(payTo)) - before).to.equal(500n);
      expect((await rail.status(dropped)).used).to.equal(false);
    });
  });
});
