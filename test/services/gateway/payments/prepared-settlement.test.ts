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
    /** The payments the host asked the rail to prepare a settlement of. */
    const prepared: VerifiedPayment[] = [];
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
              prepared.push(payment);
              const settlement = target.prepareSettlement(payment);
              return { discard: () => (asked.push('discard'), settlement.discard()) };
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
    beforeEach(() => {
      asked.splice(0);
      prepared.splice(0);
    });
    const payment = async () =>
      payingClient(chain).createPaymentPayload(rail.paymentRequired(resource) as PaymentRequired);
    /** A paid call whose work succeeds after `during` (given the payment's record id). */
    const paidCall = async (during: (id: string) => Promise<unknown> = async () => undefined) =>
      payments.run(await payment(), resource, undefined, async () => {
        const record = (await kernel.db('payment_settlements').where({ state: 'executing' }).first('id')) as {
          id: string;
        };
        await during(record.id);
        return { value: { content: [] }, succeeded: true };
      });

    it('signs while the mark is written and sends only once the record says settling', async () => {
      const before = await balances(chain)(payTo);
      const { receipt } = await paidCall();
      expect(receipt?.success, JSON.stringify(receipt)).to.equal(true);
      expect(asked).to.deep.equal(['prepare', 'settle when settling']);
      expect((await balances(chain)(payTo)) - before).to.equal(500n);
    });

    it('a mark not written (the record released meanwhile): discarded, never sent, and the next payment settles', async () => {
      const before = await balances(chain)(payTo);
      const released = await paidCall(async (id) => {
        await moveSettlement({ db: kernel.db, clock: systemClock }, id, ['executing'], { state: 'released' });
      });
      expect(released.receipt).to.equal(undefined);
      expect(asked).to.deep.equal(['prepare', 'discard']);
      // The next settlement's nonce follows the discarded one's: it mines only once that one is filled.
      const next = await Promise.race([
        paidCall(),
        new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), 10_000)),
      ]);
      expect(next?.receipt?.success, 'settled within 10 s').to.equal(true);
      expect((await balances(chain)(payTo)) - before).to.equal(500n);
      expect((await rail.status(prepared[0] as VerifiedPayment)).used).to.equal(false);
    });
  });
});
