import { expect } from 'chai';
import type { LocalAccount } from 'viem/accounts';
import { ManualClock } from '../../../../core/clock.ts';
import { databaseNowMs } from '../../../../core/db/database.ts';
import { jobLeases } from '../../../../services/kernel.ts';
import { AnswerEvents } from '../../../../services/runtime/chat/answer-events.ts';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import { describeEachDatabase, quietLogger, stickyDatabase } from '../../../support/kernel.ts';
import { fundedAccount, ledgerOnChain, sendToken } from './chain-support.ts';
import { MIDWEEK, openLedgerWorld, randomWallet, type LedgerWorld } from './support.ts';

const USD = 1_000_000n;
const HOUR_MS = 3_600_000;

/**
 * Scale-out (issue #29): the runtime's timed jobs on two replicas of one database. Each interval's
 * settlement sweep, hold expiry sweep, full balance refresh and chat events retention runs on one
 * replica (a lease per interval); the deposit poll runs on the replica keeping the watch's lease, and
 * the other takes it over once the holder stops or dies.
 */
describe('runtime jobs across replicas: each occurrence on one replica', function () {
  this.timeout(120_000);
  let chain: DevChain;
  let funder: LocalAccount;
  before(async () => {
    chain = await startDevChain();
    funder = await fundedAccount(chain, 100n * USD);
  });
  after(() => chain?.stop());

  describeEachDatabase('runtime jobs', (database) => {
    let sticky: ReturnType<typeof stickyDatabase>;
    let clock: ManualClock;
    let a: LedgerWorld;
    let b: LedgerWorld;
    /** Another runtime on the shared database (a replica of its own). */
    let open: () => Promise<LedgerWorld>;

    beforeEach(async () => {
      sticky = stickyDatabase(database);
      clock = new ManualClock(MIDWEEK);
      const settings = ledgerOnChain(chain, {
        confirmations: 1,
        holdTtlSeconds: 120,
        sweep: { intervalSeconds: 3600, minimumAmount: String(USD) },
      });
      // Heartbeats too rare to be written during a test: a replica dies when the test says so.
      const replicas = { shared: true, leaseSeconds: 3, heartbeatSeconds: 300, replicaDeadAfterSeconds: 600 };
      open = () =>
        openLedgerWorld(sticky.database, { clock, config: { ledger: settings, database: replicas } });
      a = await open();
      b = await open();
    });
    afterEach(async () => {
      await b?.close();
      await a?.close();
      await sticky.drop();
    });

    /** The stored chat events of a runtime on `world`'s kernel (their retention is a job too). */
    const answersOf = (world: LedgerWorld) =>
      new AnswerEvents({
        ...jobLeases(world.kernel),
        db: world.kernel.db,
        clock,
        replica: world.kernel.replica,
        logger: quietLogger(),
        retentionMs: 60_000,
      });
    /** `world`'s replica killed: its last heartbeat older than replicaDeadAfterSeconds, by the database's clock. */
    const kill = async (world: LedgerWorld) => {
      const db = world.kernel.db;
      await db('replicas')
        .where({ id: world.kernel.replica.id })
        .update({ heartbeat_at: db.raw('? - ?', [databaseNowMs(db), 601_000]) });
    };
    const leaseHolders = async (prefix: string) =>
      (await a.kernel
        .db('leases')
        .whereLike('name', `${prefix}:%`)
        .orderBy('name')
        .pluck('holder')) as string[];

    it('sweeps, ends expired holds, refreshes balances and deletes expired chat events once per interval, on one replica of two', async () => {
      const wallet = randomWallet();
      await sendToken(chain, funder, (await a.service.deposits.of(wallet)).address, 5n * USD);
      await a.service.watcher!.poll({ fullRefresh: true });
      const agentId = (await a.service.agents.create(wallet, { name: 'agent', model: 'm' })).id;
      await a.ledger.charge({ wallet, agentId, amount: 2n * USD, idempotencyKey: 'spend' });
      await b.service.holds.hold({
        wallet,
        agentId,
        amount: USD,
        idempotencyKey: 'crashed',
        purpose: 'chat',
      });
      const answers = [answersOf(a), answersOf(b)] as const;
      const jobs = {
        'ledger:sweep': (world: LedgerWorld) => world.service.sweeper!.sweepDue(),
        'ledger:expire-holds': (world: LedgerWorld) => world.service.holds.releaseExpiredDue(),
        'ledger:refresh': (world: LedgerWorld) => world.service.watcher!.refreshDue(),
        'chat:retention': (world: LedgerWorld) => answers[world === a ? 0 : 1].retentionDue(),
      };
      for (const [name, due] of Object.entries(jobs))
        expect(await Promise.all([due(a), due(b)]), `${name}: not in the first interval`).to.deep.equal([
          false,
          false,
        ]);
      for (const round of [1, 2]) {
        // Past every job's interval (the sweep's is an hour), as both replicas' clocks read it.
        clock.advance(2 * HOUR_MS);
        for (const [name, due] of Object.entries(jobs)) {
          expect(
            (await Promise.all([due(a), due(b)])).filter(Boolean),
            `${name}, round ${round}`,
          ).to.have.length(1);
          expect(await Promise.all([due(b), due(a)]), `${name}, round ${round}, again`).to.deep.equal([
            false,
            false,
          ]);
          // Each interval's lease, kept by the replica that ran it.
          expect(await leaseHolders(name), name).to.have.length(round);
        }
        if (round === 1) {
          const swept = await a.kernel
            .db('ledger_transfers')
            .where({ wallet, kind: 'sweep' })
            .count({ n: '*' });
          expect(Number(swept[0]!.n), 'one sweep of the spend').to.equal(1);
          expect(await a.service.holds.get(wallet, 'crashed'), 'the expired hold ended').to.equal(undefined);
        }
      }
    });

    it('takes over the interval of a replica that died running it, and leaves a live one’s alone', async () => {
      const slot = Math.floor((clock.now().getTime() + 2 * HOUR_MS) / HOUR_MS);
      clock.advance(2 * HOUR_MS);
      // A took this hour's sweep and is still running it: its lease taken, neither renewed nor released.
      const taken = await a.kernel.leases.acquire(`ledger:sweep:${slot}`, a.kernel.replica.id, 60_000);
      expect(taken).to.include({ fence: 1 });
      expect(await b.service.sweeper!.sweepDue(), 'A is alive').to.equal(false);
      await kill(a);
      expect(await b.service.sweeper!.sweepDue(), 'A is dead: B runs the hour').to.equal(true);
      expect(await leaseHolders('ledger:sweep')).to.deep.equal([b.kernel.replica.id]);
    });

    it('polls deposits on the replica keeping the watch; the other takes it over once the holder stops, or dies', async () => {
      const [wallet, other] = [randomWallet(), randomWallet()];
      const deposit = (await a.service.deposits.of(wallet)).address;
      expect(await a.service.watcher!.pollIfWatching(), 'A takes the watch').to.not.equal(undefined);
      expect(await b.service.watcher!.pollIfWatching(), 'B reads nothing').to.equal(undefined);
      await sendToken(chain, funder, deposit, USD);
      expect(await b.service.watcher!.pollIfWatching()).to.equal(undefined);
      expect((await a.service.watcher!.pollIfWatching())!.deposits).to.equal(1);
      // A stops (a graceful shutdown gives the watch up): B takes it at its next tick.
      await a.service.watcher!.stop();
      expect(await a.service.watcher!.pollIfWatching(), 'a stopped watcher polls no more').to.equal(
        undefined,
      );
      await sendToken(chain, funder, deposit, USD);
      expect((await b.service.watcher!.pollIfWatching())!.deposits).to.equal(1);
      expect((await a.ledger.balance(wallet)).onChainBalance).to.equal(2n * USD);
      // B holds it now; a third replica C starts, and B dies: C takes over at once.
      const c = await open();
      try {
        expect(await c.service.watcher!.pollIfWatching()).to.equal(undefined);
        await kill(b);
        await sendToken(chain, funder, (await c.service.deposits.of(other)).address, USD);
        expect((await c.service.watcher!.pollIfWatching())!.deposits).to.equal(1);
        expect((await c.ledger.balance(other)).onChainBalance).to.equal(USD);
      } finally {
        await c.close();
      }
    });
  });
});
