import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { systemClock } from '../../../../core/clock.ts';
import { SecretRegistry } from '../../../../core/log.ts';
import type { PaymentRailV1 } from '@sigil/plugin-api';
import x402Evm from '../../../../plugins/payments/x402-evm/index.ts';
import { Payments } from '../../../../services/gateway/payments/payments.ts';
import type { Kernel } from '../../../../services/kernel.ts';
import { genesisTimestamp, untilWallClockPasses } from '../../../solidity/support.ts';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import { describeEachDatabase, openTestKernel, quietLogger } from '../../../support/kernel.ts';
import { fundedPayer, pay, payingClient, railPlugin } from './support.ts';

const RESOURCE = { url: 'mcp://tool/probe__echo', description: 'a paid call' };

/**
 * The gateway's payment records across `sigil up` restarts: a dev chain kept in its state file is the
 * same chain, and the records and the chain agree; a new chain (its state removed) fences the old
 * chain's records, so reconciliation reports no disagreement instead of every old settlement missing.
 */
describe('payments: a dev chain kept between runs, and one replaced', function () {
  this.timeout(120_000);

  describeEachDatabase('restarts', (database) => {
    let dir: string;
    let kernel: Kernel;
    const running: { stop(): Promise<void> }[] = [];
    beforeEach(async () => {
      dir = mkdtempSync(join(tmpdir(), 'sigil-payments-chain-'));
      kernel = await openTestKernel({ database });
    });
    afterEach(async () => {
      for (const item of running.splice(0).reverse()) await item.stop();
      await kernel.close();
      rmSync(dir, { recursive: true, force: true });
    });

    const payTo = privateKeyToAccount(generatePrivateKey()).address;
    /** The gateway's payments on `chain`, recovered as at start-up. */
    const gatewayOn = async (chain: DevChain): Promise<Payments> => {
      const { plugin } = railPlugin(chain, { payTo });
      const rail = (await x402Evm.create({
        config: x402Evm.config.parse(plugin.options),
        deps: { secrets: new SecretRegistry(), clock: systemClock, leases: kernel.leases },
        logger: quietLogger(),
      })) as PaymentRailV1 & { start(): Promise<void>; stop(): Promise<void> };
      await rail.start();
      running.push(rail);
      const payments = new Payments({
        rail,
        db: kernel.db,
        clock: systemClock,
        logger: quietLogger(),
        replica: kernel.replica,
        leases: kernel.leases,
        leaseMs: 30_000,
        staleAfterMs: 60_000,
      });
      await payments.recover();
      running.push(payments);
      return payments;
    };
    const paymentFor = async (chain: DevChain, payments: Payments) => {
      const payer = await fundedPayer(chain);
      const required = (await payments.paymentRequired(RESOURCE)).details?.paymentRequired as PaymentRequired;
      return pay(payingClient(chain, payer), required);
    };
    const states = async () =>
      (
        (await kernel.db('payment_settlements').orderBy('created_at').select('state', 'reason')) as {
          state: string;
          reason: string | null;
        }[]
      ).map((row) => [row.state, row.reason?.split(':')[0] ?? null]);

    it('restarted from its state the records and the chain agree; on a new chain the old records are fenced and reconciliation finds no disagreement', async () => {
      const statePath = join(dir, 'devchain', 'state.json');
      const first = await startDevChain({ statePath });
      const firstGenesis = await genesisTimestamp(first);
      running.push(first);
      let payments = await gatewayOn(first);
      const paid = await payments.run(await paymentFor(first, payments), RESOURCE, undefined, async () => ({
        value: 'ok',
        succeeded: true,
      }));
      expect(paid.receipt).to.include({ success: true });
      // A call still running when the chain goes: reserved, never finished.
      const unfinished = await paymentFor(first, payments);
      await new Promise<void>((started) => {
        void payments.run(unfinished, RESOURCE, undefined, () => {
          started();
          return new Promise(() => undefined);
        });
      });
      expect(await payments.reconcile()).to.deep.include({ checked: 2, onChain: 1, mismatches: [] });
      for (const item of running.splice(0).reverse()) await item.stop();

      const again = await startDevChain({ statePath });
      running.push(again);
      payments = await gatewayOn(again);
      expect(await payments.reconcile()).to.deep.include({ checked: 2, onChain: 1, mismatches: [] });
      for (const item of running.splice(0).reverse()) await item.stop();

      // A new chain in the same second as the first would have its genesis, so its identity.
      await untilWallClockPasses(firstGenesis);
      rmSync(statePath);
      const fresh = await startDevChain({ statePath });
      running.push(fresh);
      payments = await gatewayOn(fresh);
      expect(await states()).to.deep.equal([
        ['settled', null],
        ['released', 'chain_replaced'],
      ]);
      expect(await payments.reconcile()).to.deep.include({ checked: 0, onChain: 0, mismatches: [] });
      // Payments on the new chain are reconciled as usual.
      await payments.run(await paymentFor(fresh, payments), RESOURCE, undefined, async () => ({
        value: 'ok',
        succeeded: true,
      }));
      expect(await payments.reconcile()).to.deep.include({ checked: 1, onChain: 1, mismatches: [] });
    });
  });
});
