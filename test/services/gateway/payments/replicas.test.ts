import { decodePaymentResponseHeader } from '@x402/core/http';
import type { PaymentPayload } from '@x402/core/types';
import { expect } from 'chai';
import { privateKeyToAccount } from 'viem/accounts';
import { getAddress, type Hex } from 'viem';
import { databaseNowMs } from '../../../../core/db/database.ts';
import { chainClients } from '../../../solidity/support.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import {
  anvilWorld,
  devAccountKey,
  eventually,
  paidGateway,
  payingClient,
  RpcProxy,
  sendsTransaction,
  settlementRows,
  stopSharedProbeWorld,
  type PaidGateway,
  type ProxyDecision,
  type SettlementRecord,
} from './support.ts';

after(stopSharedProbeWorld); // root level: once every file has used the shared probe world

/** Replicas share the database; heartbeats too rare to be written during a test (a replica dies when a test says so). */
const REPLICAS = { shared: true, heartbeatSeconds: 300, replicaDeadAfterSeconds: 600 };

/**
 * Scale-out (issue #29, WP7): two replicas of one gateway on one database, each reaching the chain
 * through its own RPC proxy (so what each sends is counted apart). A settling account is one nonce
 * sequence: each replica settles from an account it leases, and one that holds none leaves its
 * settlements to those that do. A call running on a live replica is never released by another,
 * however long it runs; a dead replica's is released at once, never charged. Each test ends with
 * records, chain and reconciler agreeing.
 */
describe('payments across replicas: settling accounts leased, calls released by liveness', function () {
  this.timeout(180_000);
  const anvil = anvilWorld();

  describeEachDatabase('gateway replicas', (database) => {
    let proxies: [RpcProxy, RpcProxy];
    /** Two settling accounts (anvil dev accounts), each reaching the chain only through these tests' gateways. */
    let keys: [Hex, Hex];
    let running: PaidGateway[];

    before(async () => {
      proxies = [await RpcProxy.start(anvil.chain.rpcUrl), await RpcProxy.start(anvil.chain.rpcUrl)];
      keys = [devAccountKey(anvil.nextFacilitator()), devAccountKey(anvil.nextFacilitator())];
    });
    beforeEach(() => (running = []));
    afterEach(async () => {
      for (const proxy of proxies) proxy.reset();
      // The second replica first: the first one's stop drops the database.
      for (const gateway of running.reverse()) await gateway.stop();
    });
    after(async () => {
      for (const proxy of proxies ?? []) await proxy.stop();
    });

    /**
     * Two replicas, A started first, each reaching the chain through its proxy, with the built-in
     * facilitator `accounts` (its settling account or accounts).
     */
    async function twoReplicas(
      accounts: { privateKey: Hex } | { privateKeys: Hex[] },
      clocks: { now(): Date }[] = [],
    ): Promise<[PaidGateway, PaidGateway]> {
      const railOptions = { facilitator: { kind: 'builtin', ...accounts } };
      const options = (at: 0 | 1) => ({
        facilitatorIndex: 0, // not used: railOptions names the accounts
        rpcUrl: proxies[at].url,
        railOptions,
        database: REPLICAS,
        ...(clocks[at] ? { clock: clocks[at] } : {}),
      });
      const a = await paidGateway(anvil.world, anvil.chain, database, options(0));
      running.push(a);
      const b = await paidGateway(anvil.world, anvil.chain, database, { ...options(1), replicaOf: a });
      running.push(b);
      return [a, b];
    }
    const payFor = async (gateway: PaidGateway, tool = 'echo'): Promise<PaymentPayload> =>
      payingClient(anvil.chain, gateway.payer).createPaymentPayload(await gateway.required(tool));
    const rowOf = async (gateway: PaidGateway, payment: PaymentPayload) => {
      const { from, nonce } = (payment.payload as { authorization: { from: string; nonce: string } })
        .authorization;
      const id = `:${from}:${nonce}`.toLowerCase();
      return (await gateway.records('payment_settlements').select().where('id', 'like', `%${id}`).first()) as
        (SettlementRecord & { claimed_by: string | null }) | undefined;
    };
    const receiptOf = (res: Response) => {
      const header = res.headers.get('payment-response');
      expect(header, 'a receipt: the call was charged').to.be.a('string');
      return decodePaymentResponseHeader(header as string);
    };
    /** Who sent a settlement's transaction. */
    const senderOf = async (transaction: string) =>
      getAddress(
        (await chainClients(anvil.chain).publicClient.getTransaction({ hash: transaction as Hex })).from,
      );
    /** A's books, B's payer among its payers (one payee, one database). */
    const balanced = (a: PaidGateway, b: PaidGateway) =>
      a.expectBalanced([{ address: b.payer.address, before: b.payerBefore }]);

    it('one account for two replicas: only its holder settles, the other’s calls are settled by it and answered with their receipt, and no two sends race for its nonce', async () => {
      // As configured for one gateway, then started twice.
      const [a, b] = await twoReplicas({ privateKey: keys[0] });
      const [payA, payB] = [await payFor(a), await payFor(b)];
      // Each replica's first send is held until the other's arrives, as two senders from one
      // account would race; A's also go once B left its settlement to the account's holder (A, which
      // took the account's lease at its start): B's record past `executing` and not B's, unclaimed or
      // already claimed by A's retry worker, whose send then waits here too. A's sends all wait for
      // that one moment and go on in the order A made them, as over its one connection.
      const holder = async () =>
        (
          (await b.records('leases').where('name', 'like', 'x402-evm:facilitator:%').first('holder')) as {
            holder: string;
          }
        ).holder;
      const heldByA = await holder();
      let aSending: () => void = () => undefined;
      let bSending: () => void = () => undefined;
      const aSent = new Promise<void>((resolve) => (aSending = resolve));
      const bSent = new Promise<void>((resolve) => (bSending = resolve));
      const queuedByB = eventually('B’s settlement left to the account’s holder', async () => {
        const row = await rowOf(b, payB);
        return row !== undefined && row.state !== 'executing' && [null, heldByA].includes(row.claimed_by);
      });
      queuedByB.catch(() => undefined); // B sending instead releases A
      const aReleased = Promise.race([bSent, queuedByB]);
      proxies[0].intercept = async (methods): Promise<ProxyDecision> => {
        if (!sendsTransaction(methods)) return 'forward';
        aSending();
        await aReleased;
        return 'forward';
      };
      proxies[1].intercept = async (methods): Promise<ProxyDecision> => {
        if (!sendsTransaction(methods)) return 'forward';
        bSending();
        await aSent;
        return 'forward';
      };
      const [onA, onB] = await Promise.all([
        a.callRest('echo', { message: 'on a' }, payA),
        b.callRest('echo', { message: 'on b' }, payB),
      ]);
      expect([onA.status, onB.status]).to.deep.equal([200, 200]);
      const [receiptA, receiptB] = [receiptOf(onA), receiptOf(onB)];
      expect([receiptA.success, receiptB.success]).to.deep.equal([true, true]);
      const account = privateKeyToAccount(keys[0]).address;
      expect([await senderOf(receiptA.transaction), await senderOf(receiptB.transaction)]).to.deep.equal([
        account,
        account,
      ]);
      expect(proxies[1].transactionsSent(), 'B sent nothing').to.equal(0);
      expect(proxies[0].transactionsSent(), 'one send per settlement, none refused').to.equal(2);
      expect((await balanced(a, b)).settled).to.equal(1000n);

      // A stops and gives the account up: B takes it (at its next look, a third of a lease) and settles itself.
      await a.serving.stop();
      await eventually('B holding the account', async () => (await holder()) !== heldByA);
      const alone = await b.callRest('echo', { message: 'b alone' }, await payFor(b));
      expect(alone.status).to.equal(200);
      expect(await senderOf(receiptOf(alone).transaction)).to.equal(account);
      expect(proxies[1].transactionsSent()).to.equal(1);
    });

    it('an account per replica: each settles from its own, at once, and none waits for the other', async () => {
      const [a, b] = await twoReplicas({ privateKeys: keys });
      const calls = await Promise.all(
        [a, b, a, b, a, b].map(async (gateway, at) => ({
          gateway,
          res: await gateway.callRest('echo', { message: `call ${at}` }, await payFor(gateway)),
        })),
      );
      const senders = new Map<PaidGateway, Set<string>>([
        [a, new Set()],
        [b, new Set()],
      ]);
      for (const { gateway, res } of calls) {
        expect(res.status).to.equal(200);
        const receipt = receiptOf(res);
        expect(receipt.success).to.equal(true);
        senders.get(gateway)!.add(await senderOf(receipt.transaction));
      }
      const accounts = keys.map((key) => privateKeyToAccount(key).address);
      expect([...senders.get(a)!, ...senders.get(b)!].sort()).to.deep.equal([...accounts].sort());
      expect([proxies[0].transactionsSent(), proxies[1].transactionsSent()]).to.deep.equal([3, 3]);
      expect((await balanced(a, b)).settled).to.equal(3000n);
    });

    it('a live replica’s call is never released by another, however long it runs; a dead replica’s is released at once, never charged', async () => {
      // B's clock is past the stale window ((10 s queue + 60 s timeout + 10 s) after a reservation).
      const ahead = { now: () => new Date(Date.now() + 81_000) };
      const [a, b] = await twoReplicas({ privateKey: keys[0] }, [{ now: () => new Date() }, ahead]);
      const slow = await payFor(a, 'sleep');
      // B's worker looks every second while the call runs 2.5 s: a live replica's call stays its own.
      const res = await a.callRest('sleep', { ms: 2500 }, slow);
      expect(res.status).to.equal(200);
      expect(receiptOf(res).success).to.equal(true);
      await eventually('the settled mark', async () => (await rowOf(a, slow))?.state === 'settled');

      const dying = await payFor(a, 'sleep');
      const call = a.callRest('sleep', { ms: 5000 }, dying);
      await eventually('the reservation', async () => (await rowOf(a, dying))?.state === 'executing');
      // A dies: its last heartbeat is older than replicaDeadAfterSeconds, by the database's clock.
      const db = a.records;
      await db('replicas')
        .where({ id: (await rowOf(a, dying))!.claimed_by })
        .update({ heartbeat_at: db.raw('? - ?', [databaseNowMs(db), 601_000]) });
      const released = await eventually(
        'the release of the dead replica’s call',
        async () => {
          const row = await rowOf(a, dying);
          return row?.state === 'released' && row;
        },
        4000, // at once: before the call would even have ended
      );
      expect(released.transaction).to.equal(null);
      const answered = await call;
      expect(answered.status, await answered.clone().text()).to.equal(200);
      expect(answered.headers.get('payment-response'), 'no receipt: nothing was charged').to.equal(null);
      const { settled, rows } = await balanced(a, b);
      expect(settled).to.equal(500n);
      expect((await settlementRows(a.records)).map((row) => row.state).sort()).to.deep.equal(
        rows.map((row) => row.state).sort(),
      );
    });
  });
});
