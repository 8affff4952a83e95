import { decodePaymentResponseHeader } from '@x402/core/http';
import { expect } from 'chai';
import { ManualClock, systemClock, type Clock } from '../../../../core/clock.ts';
import { DatabaseLeases } from '../../../../core/db/leases.ts';
import { Replica } from '../../../../core/db/replicas.ts';
import { SecretRegistry } from '../../../../core/log.ts';
import type { PaymentRailV1 } from '@sigil/plugin-api';
import x402Evm from '../../../../plugins/payments/x402-evm/index.ts';
import { Payments } from '../../../../services/gateway/payments/payments.ts';
import { describeEachDatabase, quietLogger } from '../../../support/kernel.ts';
import {
  chainBehindProxy,
  devAccountKey,
  eventually,
  paidGateway,
  payingClient,
  railPlugin,
  sharedProbeWorld,
  stopSharedProbeWorld,
  type PaidGateway,
  type ProxyDecision,
} from './support.ts';

after(stopSharedProbeWorld); // root level: once every file has used the shared probe world

/** The reconciliation lease of the replicas made here: short, so every replica looks often. */
const LEASE_MS = 300;

interface Report {
  checked: number;
  onChain: number;
  mismatches: { id: string; problem: string; record?: { transaction: string | null } }[];
}

/**
 * The reconciler keeps the settlements it has read from the chain and reads only the blocks since its
 * last reading, from REREAD_BLOCKS (64) back, so a reorganization within that depth is seen; a chain
 * shorter than its last reading is read again from block 0. When a record marked settled is missing
 * from what it read, it reads again (incrementally: 65 blocks) before it reports it.
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

    it('does not report a payment settled while it read the chain: it reads again first', async () => {
      let held: (() => void) | undefined;
      const reading = new Promise<void>((reached) => {
        const release = new Promise<void>((resolve) => (held = resolve));
        let first = true;
        world.proxy.intercept = async (methods): Promise<ProxyDecision> => {
          if (!first || !methods.includes('eth_getLogs')) return 'forward';
          first = false;
          reached();
          await release;
          return 'forward';
        };
      });
      const reconciled = reconcile();
      await reading; // the chain's newest block is read; its logs wait
      const transaction = await paidCall();
      held?.();
      const { report } = await reconciled;
      expect(report).to.deep.include({ checked: 3, onChain: 3, mismatches: [] });
      expect((await reconcile()).report.mismatches).to.deep.equal([]);
      expect(transaction).to.match(/^0x[0-9a-f]{64}$/);
    });

    it('names each kind of disagreement: amount, state, a settlement without its record', async () => {
      const table = () => gateway.records('payment_settlements');
      const settled = (await table().where({ state: 'settled' }).orderBy('id')) as {
        id: string;
        amount: string;
        transaction: string;
      }[];
      expect(settled).to.have.length(3);
      const [altered, failed, removed] = settled as [
        (typeof settled)[0],
        (typeof settled)[0],
        (typeof settled)[0],
      ];
      const removedRow = (await table().where({ id: removed.id }).first()) as Record<string, unknown>;
      await table().where({ id: altered.id }).update({ amount: '1' });
      await table().where({ id: failed.id }).update({ state: 'failed' });
      await table().where({ id: removed.id }).delete();
      try {
        const { report } = await reconcile();
        expect(report.checked).to.equal(2);
        expect(report.onChain).to.equal(3);
        const byId = new Map(report.mismatches.map((m) => [m.id, m]));
        expect(byId.size).to.equal(3);
        expect(byId.get(altered.id)).to.deep.equal({
          id: altered.id,
          problem: 'amount_differs',
          record: { state: 'settled', amount: '1', transaction: altered.transaction },
          chain: { amount: altered.amount, transaction: altered.transaction },
        });
        expect(byId.get(failed.id)).to.deep.equal({
          id: failed.id,
          problem: 'on_chain_not_settled',
          record: { state: 'failed', amount: failed.amount, transaction: failed.transaction },
          chain: { amount: failed.amount, transaction: failed.transaction },
        });
        expect(byId.get(removed.id)).to.deep.equal({
          id: removed.id,
          problem: 'on_chain_not_settled',
          chain: { amount: removed.amount, transaction: removed.transaction },
        });
      } finally {
        await table().where({ id: altered.id }).update({ amount: altered.amount });
        await table().where({ id: failed.id }).update({ state: 'settled' });
        await table().insert(removedRow);
      }
      expect((await reconcile()).report).to.deep.include({ checked: 3, onChain: 3, mismatches: [] });
    });

    it('sees a settlement undone by a reorganization within the depth it reads again', async () => {
      const snapshot = await anvil('evm_snapshot');
      const transaction = await paidCall();
      expect((await reconcile()).report.mismatches).to.deep.equal([]);
      await anvil('evm_revert', [snapshot]);
      await anvil('anvil_mine', ['0x5']); // the chain grows past the last reading again, without it
      const { report, blocksRead } = await reconcile();
      // Twice from 64 blocks below the last reading: the second time for the missing settlement.
      expect(blocksRead).to.be.below(2 * 100);
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
      // From block 0, then again from 64 below that reading for the settlement the first one lacks.
      expect(blocksRead).to.equal(latest + 1 + 65);
      // Still one payment undone by the reorganization before, and the rest on chain.
      expect(report.mismatches.map((m) => m.problem)).to.deep.equal(['settled_not_on_chain']);
      expect(report.onChain).to.equal(3);
    });

    /** The gateway's rail as another process has it (on anvil directly), stopped after the test. */
    const railInstances: (PaymentRailV1 & { stop(): Promise<void> })[] = [];
    afterEach(async () => {
      for (const rail of railInstances.splice(0)) await rail.stop();
    });
    const railOfGateway = async (): Promise<PaymentRailV1> => {
      const { plugin } = railPlugin(world.chain, {
        payTo: gateway.payTo,
        facilitator: { kind: 'builtin', privateKey: devAccountKey(5) },
      });
      const instance = (await x402Evm.create({
        config: x402Evm.config.parse(plugin.options),
        deps: {
          secrets: new SecretRegistry(),
          clock: systemClock,
          leases: new DatabaseLeases(gateway.records),
        },
        logger: quietLogger(),
      })) as PaymentRailV1 & { start(): Promise<void>; stop(): Promise<void> };
      await instance.start();
      railInstances.push(instance);
      return instance;
    };
    /** Payments of another replica of the gateway, on its database; stopped and unregistered by `close`. */
    const replicaPayments = async (
      rail: PaymentRailV1,
      options: { clock?: Clock; leases?: DatabaseLeases; reconcileIntervalMs?: number } = {},
    ) => {
      const replica = await Replica.register(gateway.records, quietLogger(), {
        heartbeatMs: 10_000,
        deadAfterMs: 30_000,
        shared: true,
      });
      const payments = new Payments({
        rail,
        db: gateway.records,
        clock: options.clock ?? systemClock,
        logger: quietLogger(),
        replica,
        leases: options.leases ?? new DatabaseLeases(gateway.records),
        leaseMs: LEASE_MS,
        staleAfterMs: 60_000,
        ...(options.reconcileIntervalMs ? { reconcileIntervalMs: options.reconcileIntervalMs } : {}),
      });
      return {
        payments,
        replica,
        close: async () => {
          await payments.stop();
          await replica.close();
        },
      };
    };

    it('reads a rail without latestBlock() whole each time, keeping only what it read last', async () => {
      const instance = await railOfGateway();
      const withoutLatestBlock = new Proxy(instance, {
        get: (target, name) => (name === 'latestBlock' ? undefined : (Reflect.get(target, name) as unknown)),
      });
      const { payments, close } = await replicaPayments(withoutLatestBlock);
      const cursor = () => gateway.records('payment_chain_cursor').select();
      const cursorBefore = await cursor();
      try {
        const expected = (await reconcile()).report;
        for (let round = 0; round < 2; round += 1) {
          const report = await payments.reconcile();
          expect(report, `round ${round + 1}`).to.deep.equal(expected);
          const stored = (await gateway.records('payment_chain_settlements').count({ n: '*' }).first()) as {
            n: number | string;
          };
          expect(Number(stored.n)).to.equal(expected.onChain);
        }
        // The gateway's own incremental reading is left where it was.
        expect(await cursor()).to.deep.equal(cursorBefore);
      } finally {
        await close();
      }
    });

    it('two replicas reconcile each interval once between them, whichever looks first', async () => {
      const intervalMs = 600_000;
      // Far from now: the gateway's own reconciliation (by the system clock) takes other leases.
      const clock = new ManualClock(Date.UTC(2026, 2, 18, 10, 0, 0));
      /** Each replica's looks at each interval's lease, by `<holder> <lease>`. */
      const looks = new Map<string, number>();
      class Looking extends DatabaseLeases {
        override acquire(name: string, holder: string, ttlMs: number) {
          looks.set(`${holder} ${name}`, (looks.get(`${holder} ${name}`) ?? 0) + 1);
          return super.acquire(name, holder, ttlMs);
        }
      }
      const rail = await railOfGateway();
      const replicas = await Promise.all(
        [0, 1].map(async () => {
          const reads = { count: 0 };
          const counted = new Proxy(rail, {
            get: (target, name) =>
              name === 'settlementsOnChain'
                ? (from: bigint) => ((reads.count += 1), target.settlementsOnChain(from))
                : (Reflect.get(target, name) as unknown),
          });
          const leases = new Looking(gateway.records);
          return {
            reads,
            ...(await replicaPayments(counted, { clock, leases, reconcileIntervalMs: intervalMs })),
          };
        }),
      );
      try {
        for (const { payments } of replicas) payments.start();
        for (let round = 0; round < 2; round += 1) {
          const before = replicas.map(({ reads }) => reads.count);
          clock.advance(intervalMs);
          const lease = `payments:reconcile:${Math.floor(clock.now().getTime() / intervalMs)}`;
          // Each replica looks again only after a job of its own has ended.
          await eventually('both replicas looked twice', async () =>
            replicas.every(({ replica }) => (looks.get(`${replica.id} ${lease}`) ?? 0) >= 2),
          );
          const reconciled = replicas.map(({ reads }, at) => reads.count > before[at]!);
          expect(reconciled.filter(Boolean), `interval ${round + 1}`).to.have.length(1);
        }
      } finally {
        for (const { close } of replicas) await close();
      }
    });
  });
});
