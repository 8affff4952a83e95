import { expect } from 'chai';
import { keccak256, type Address, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount, type LocalAccount } from 'viem/accounts';
import { ManualClock } from '../../../../core/clock.ts';
import { databaseNowMs } from '../../../../core/db/database.ts';
import { chainClients } from '../../../solidity/support.ts';
import {
  chainBehindProxy,
  RpcProxy,
  sendsTransaction,
  type ProxyDecision,
} from '../../gateway/payments/support.ts';
import { describeEachDatabase, stickyDatabase } from '../../../support/kernel.ts';
import { fundedAccount, ledgerOnChain, sendToken, tokenBalance } from './chain-support.ts';
import { eventually, MIDWEEK, openLedgerWorld, randomWallet, type LedgerWorld } from './support.ts';

const USD = 1_000_000n;
/** How long a transfer's claim lasts unrenewed (Transfers' CLAIM_MS), and a moment more. */
const PAST_A_CLAIM_MS = 61_000;

/**
 * Scale-out (issue #29, WP7): two runtimes on one database, as two replicas behind a load balancer,
 * each reaching the chain through its own RPC proxy (so what each sends is counted apart). Only the
 * replica holding the operator account's lease sends withdrawals and sweeps; the other's wait for it.
 * A transfer a live replica is sending stays its own however long the send takes; a dead replica's
 * is taken over at once, and its recorded transaction sent again as it is, never a second one.
 */
describe('ledger across replicas: one sender, each transfer sent once', function () {
  this.timeout(120_000);
  const rpc = chainBehindProxy();
  let proxyB: RpcProxy;
  let funder: LocalAccount;

  before(async () => {
    proxyB = await RpcProxy.start(rpc.chain.rpcUrl);
    funder = await fundedAccount(rpc.chain, 1000n * USD);
  });
  afterEach(() => proxyB.reset());
  after(() => proxyB?.stop());

  describeEachDatabase('ledger replicas', (database) => {
    let sticky: ReturnType<typeof stickyDatabase>;
    let clock: ManualClock;
    let a: LedgerWorld;
    let b: LedgerWorld;
    /** Sends held at A's proxy: released after each test, so nothing outlives its runtime. */
    let releaseA: () => void;

    beforeEach(async () => {
      sticky = stickyDatabase(database);
      clock = new ManualClock(MIDWEEK);
      const settings = ledgerOnChain(rpc.chain, { confirmations: 1 });
      // Heartbeats too rare to be written during a test: a replica dies when the test says so.
      const replicas = { shared: true, leaseSeconds: 3, heartbeatSeconds: 300, replicaDeadAfterSeconds: 600 };
      const on = (proxy: RpcProxy) =>
        openLedgerWorld(sticky.database, {
          clock,
          config: { ledger: { ...settings, rpcUrl: proxy.url }, database: replicas },
        });
      a = await on(rpc.proxy);
      b = await on(proxyB);
      releaseA = () => undefined;
      // A starts first, so A holds the operator account.
      await a.service.worker!.start();
      await b.service.worker!.start();
    });
    afterEach(async () => {
      releaseA();
      await b?.close();
      await a?.close();
      await sticky.drop();
    });

    /** A wallet holding `amount` at its deposit address, as both replicas read it. */
    async function fundedWallet(amount: bigint): Promise<Address> {
      const wallet = randomWallet();
      const deposit = (await a.service.deposits.of(wallet)).address;
      await sendToken(rpc.chain, funder, deposit, amount);
      await a.service.watcher!.poll({ fullRefresh: true });
      expect((await b.ledger.balance(wallet)).onChainBalance).to.equal(amount);
      return wallet;
    }
    /** A's proxy holds every send until `until` resolves; resolves once the first is held. */
    function holdSendsOfA(until: Promise<unknown>): Promise<void> {
      let held: () => void = () => undefined;
      const first = new Promise<void>((resolve) => (held = resolve));
      rpc.proxy.intercept = async (methods): Promise<ProxyDecision> => {
        if (!sendsTransaction(methods)) return 'forward';
        held();
        await until;
        return 'forward';
      };
      return first;
    }
    const operatorNonce = () =>
      chainClients(rpc.chain).publicClient.getTransactionCount({
        address: a.service.chain!.operator.address,
        blockTag: 'latest',
      });
    const withdraw = (on: LedgerWorld, wallet: Address, to: Address, key: string) =>
      on.service.withdrawals.request(wallet, { amount: USD, to, idempotencyKey: key });
    /** Runs both replicas' workers as their timers would, the clock moving, until `id` is completed. */
    const completed = (id: string) =>
      eventually(`transfer ${id} completed`, async () => {
        clock.advance(1000);
        await Promise.all([a.service.worker!.processDue(), b.service.worker!.processDue()]);
        const transfer = await a.service.transfers.get(id);
        return transfer?.state === 'completed' && transfer;
      });
    const rowOf = async (id: string) =>
      (await a.kernel.db('ledger_transfers').where({ id }).first('claimed_by', 'signed_tx')) as {
        claimed_by: string | null;
        signed_tx: Hex | null;
      };
    const fresh = () => privateKeyToAccount(generatePrivateKey()).address;
    /** A withdrawal of 1 USD asked of A, its send held at A's proxy until `releaseA()`. */
    async function withdrawalHeldOnA(idempotencyKey: string) {
      const wallet = await fundedWallet(5n * USD);
      const to = fresh();
      const nonceBefore = await operatorNonce();
      const heldA = holdSendsOfA(new Promise<void>((resolve) => (releaseA = resolve)));
      const { transfer } = await withdraw(a, wallet, to, idempotencyKey);
      await heldA;
      return { wallet, to, nonceBefore, transfer };
    }

    it('only the holder of the operator account sends: withdrawals asked of the other replica wait for it, and no two sends race for a nonce', async () => {
      const wallet = await fundedWallet(5n * USD);
      const [toA, toB] = [fresh(), fresh()];
      const nonceBefore = await operatorNonce();
      // A's send is held until B sent (as two senders would race) or B's pass is over.
      let bSent: () => void = () => undefined;
      const bSending = new Promise<void>((resolve) => (bSent = resolve));
      proxyB.intercept = (methods) => {
        if (sendsTransaction(methods)) bSent();
        return 'forward';
      };
      let bPassed: () => void = () => undefined;
      const bPass = new Promise<void>((resolve) => (bPassed = resolve));
      const heldA = holdSendsOfA(Promise.race([bSending, bPass]));
      const first = await withdraw(a, wallet, toA, 'on-a');
      await heldA;
      const second = await withdraw(b, wallet, toB, 'on-b');
      await b.service.worker!.processDue();
      bPassed();
      await completed(first.transfer.id);
      await completed(second.transfer.id);
      expect(proxyB.transactionsSent(), 'B sent nothing').to.equal(0);
      expect(rpc.proxy.transactionsSent(), 'one send per withdrawal, none refused').to.equal(2);
      expect((await operatorNonce()) - nonceBefore).to.equal(2);
      expect([await tokenBalance(rpc.chain, toA), await tokenBalance(rpc.chain, toB)]).to.deep.equal([
        USD,
        USD,
      ]);
      expect((await a.ledger.audit(wallet)).mismatches).to.deep.equal([]);
      expect((await b.ledger.balance(wallet)).withdrawn).to.equal(2n * USD);
    });

    it('a live sender whose send outlasts its claim keeps its transfer: the other replica takes neither it nor the account', async () => {
      const { wallet, to, nonceBefore, transfer } = await withdrawalHeldOnA('slow');
      // The send takes longer than a claim lasts (A's renewals, by its timer, have not moved it).
      clock.advance(PAST_A_CLAIM_MS);
      await b.service.worker!.processDue();
      await b.service.worker!.processDue();
      expect(proxyB.transactionsSent(), 'B sent nothing').to.equal(0);
      expect((await rowOf(transfer.id)).claimed_by).to.equal(a.kernel.replica.id);
      releaseA();
      const done = await completed(transfer.id);
      expect(done.txHash).to.equal(keccak256((await rowOf(transfer.id)).signed_tx!));
      expect(rpc.proxy.transactionsSent()).to.equal(1);
      expect((await operatorNonce()) - nonceBefore).to.equal(1);
      expect(await tokenBalance(rpc.chain, to)).to.equal(USD);
      expect((await a.ledger.audit(wallet)).mismatches).to.deep.equal([]);
    });

    it('a sender that dies mid-send: the other replica takes the account and the transfer at once, and sends the recorded transaction, not a second one', async () => {
      const { wallet, to, nonceBefore, transfer } = await withdrawalHeldOnA('dies');
      const recorded = (await rowOf(transfer.id)).signed_tx;
      expect(recorded, 'signed and recorded before it was sent').to.match(/^0x02/);
      // A dies: its last heartbeat is older than replicaDeadAfterSeconds, by the database's clock.
      const db = a.kernel.db;
      await db('replicas')
        .where({ id: a.kernel.replica.id })
        .update({ heartbeat_at: db.raw('? - ?', [databaseNowMs(db), 601_000]) });
      // No time passes on the clock: neither the claim nor the lease has run out.
      const done = await eventually(`transfer ${transfer.id} completed by B`, async () => {
        await b.service.worker!.processDue();
        const current = await b.service.transfers.get(transfer.id);
        return current?.state === 'completed' && current;
      });
      expect(done.txHash, 'the transaction A recorded').to.equal(keccak256(recorded!));
      expect(proxyB.transactionsSent()).to.equal(1);
      // A wakes up and its held send goes out: the same transaction, already mined.
      releaseA();
      await a.service.worker!.processDue();
      expect((await operatorNonce()) - nonceBefore, 'one transaction').to.equal(1);
      expect(await tokenBalance(rpc.chain, to)).to.equal(USD);
      expect((await b.ledger.audit(wallet)).mismatches).to.deep.equal([]);
      expect((await b.ledger.balance(wallet)).withdrawn).to.equal(USD);
    });
  });
});
