import { expect } from 'chai';
import { ManualClock } from '../../core/clock.ts';
import { databaseNowMs, type Database } from '../../core/db/database.ts';
import { Replica } from '../../core/db/replicas.ts';
import { doublingBackoff, RetryQueue, RetryWorker, type RetryQueueOptions } from '../../core/db/retries.ts';
import { eventually } from '../support/eventually.ts';
import {
  describeEachDatabase,
  openTwoHandles,
  quietLogger,
  SHARED_REPLICAS as SHARED,
  type TwoHandles,
} from '../support/kernel.ts';

const TABLE = 'retry_jobs';
const CLAIM_MS = 60_000;
const OPTIONS: RetryQueueOptions = {
  table: TABLE,
  openStates: ['open'],
  claimMs: CLAIM_MS,
  backoff: doublingBackoff(1000, 300_000),
  order: 'created_at',
  batch: 100,
  columns: ['id', 'attempts'],
};

type Job = { id: string; attempts: number };

async function createTable(db: Database): Promise<void> {
  await db.schema.createTable(TABLE, (t) => {
    t.string('id').primary();
    t.string('state').notNullable();
    t.integer('attempts').notNullable().defaultTo(0);
    t.bigInteger('next_attempt_at').notNullable().defaultTo(0);
    t.bigInteger('created_at').notNullable();
    t.string('claimed_by', 36).nullable();
    t.index(['state', 'next_attempt_at']);
  });
}

async function addJobs(db: Database, ids: string[], state = 'open'): Promise<void> {
  await db(TABLE).insert(ids.map((id, at) => ({ id, state, created_at: at })));
}

async function claimAll(queue: RetryQueue<Job>): Promise<string[]> {
  const ids: string[] = [];
  for await (const job of queue.claimDue()) ids.push(job.id);
  return ids;
}

describeEachDatabase('core: retry queue', (database) => {
  let two: TwoHandles;
  /** Two handles on one database, as two replicas have. */
  let replicas: [Database, Database];
  let clock: ManualClock;
  const register = (db: Database, settings = SHARED): Promise<Replica> => two.register(db, settings);
  /** A queue on `db`, as a replica of its own (registered) claims. */
  const queueOn = async (db: Database, options = OPTIONS): Promise<RetryQueue<Job>> =>
    new RetryQueue<Job>(db, clock, await register(db), options);
  const claimerOf = async (id: string): Promise<string | null> =>
    ((await replicas[0](TABLE).where({ id }).first('claimed_by')) as { claimed_by: string | null })
      .claimed_by;

  beforeEach(async () => {
    two = await openTwoHandles(database);
    replicas = two.handles;
    await createTable(replicas[0]);
    clock = new ManualClock(new Date('2025-01-01T00:00:00Z'));
  });

  afterEach(() => two.close());

  it('gives racing replicas disjoint rows, and together every due row', async () => {
    const ids = Array.from({ length: 30 }, (_, at) => `job-${String(at).padStart(2, '0')}`);
    await addJobs(replicas[0], ids);
    const [a, b] = (await Promise.all(replicas.map((db) => queueOn(db)))).map((queue) => queue.claimDue());
    const taken: [string[], string[]] = [[], []];
    // Both read the same due rows before either claims one, then claim in the same order: every
    // row is raced for.
    for (;;) {
      const [nextA, nextB] = await Promise.all([a!.next(), b!.next()]);
      if (!nextA.done) taken[0].push(nextA.value.id);
      if (!nextB.done) taken[1].push(nextB.value.id);
      if (nextA.done && nextB.done) break;
    }
    expect(taken[0].filter((id) => taken[1].includes(id))).to.deep.equal([]);
    expect([...taken[0], ...taken[1]].sort()).to.deep.equal(ids);
    expect(await claimAll(await queueOn(replicas[1]))).to.deep.equal([]);
  });

  it('waits out the backoff after each failed attempt, doubling, by the injected clock', async () => {
    const [db] = replicas;
    const queue = await queueOn(db);
    await addJobs(db, ['a']);
    for (const [attempts, waitMs] of [
      [1, 1000],
      [2, 2000],
      [3, 4000],
    ] as const) {
      expect(await claimAll(queue)).to.deep.equal(['a']);
      await db(TABLE).where({ id: 'a' }).update(queue.failureColumns(attempts));
      clock.advance(waitMs - 1);
      expect(await claimAll(queue), `${waitMs - 1} ms after failure ${attempts}`).to.deep.equal([]);
      clock.advance(1);
    }
    const [job] = await db(TABLE).where({ id: 'a' }).select('attempts');
    expect(Number(job.attempts)).to.equal(3);
    expect(await claimAll(queue)).to.deep.equal(['a']);
    expect(queue.failureColumns(20).next_attempt_at - clock.now().getTime()).to.equal(300_000);
  });

  it('makes a claimed row due again once its claim runs out, and never hands out a finished one', async () => {
    const [db] = replicas;
    const queue = await queueOn(db);
    await addJobs(db, ['claimed', 'later']);
    await addJobs(db, ['finished'], 'done');
    expect(await claimAll(queue)).to.deep.equal(['claimed', 'later']);
    await queue.later('later', CLAIM_MS * 2);
    expect(await claimerOf('later'), 'waiting, not claimed').to.equal(null);
    clock.advance(CLAIM_MS - 1);
    expect(await claimAll(queue)).to.deep.equal([]);
    clock.advance(1);
    expect(await claimAll(queue)).to.deep.equal(['claimed']);
  });

  it("takes the claims of dead replicas at once, on any pass; a live replica's never, however old its claim", async () => {
    const [db, other] = replicas;
    /** `replica` claims a new row `id` (the rows before are claimed, so not due). */
    const claims = async (replica: Replica, id: string) => {
      await addJobs(db, [id]);
      expect(await claimAll(new RetryQueue<Job>(db, clock, replica, OPTIONS))).to.deep.equal([id]);
    };
    const live = await register(db);
    await claims(live, 'live');
    await claims(live, 'backoff');
    await db(TABLE)
      .where({ id: 'backoff' })
      .update(new RetryQueue<Job>(db, clock, live, OPTIONS).failureColumns(1));
    const stopped = await Replica.register(db, quietLogger(), SHARED);
    await claims(stopped, 'stopped');
    const silent = await register(db);
    await claims(silent, 'silent');
    // Stopped gracefully: its row is gone.
    await stopped.close();
    // Killed: its last heartbeat is older than deadAfterMs, by the database's clock.
    await db('replicas')
      .where({ id: silent.id })
      .update({ heartbeat_at: db.raw('? - ?', [databaseNowMs(db), SHARED.deadAfterMs + 1]) });
    const otherQueue = await queueOn(other);
    // Their claims have a minute to run: the dead replicas' rows are taken now all the same.
    expect((await claimAll(otherQueue)).sort()).to.deep.equal(['silent', 'stopped']);
    await db(TABLE).whereIn('id', ['silent', 'stopped']).update({ state: 'done' });
    // The live replica's attempt outlasts its claim (its renewals did not land): still its own.
    clock.advance(CLAIM_MS);
    expect(await claimAll(otherQueue), 'the backoff is over; the live claim stays').to.deep.equal([
      'backoff',
    ]);
    expect(await claimerOf('live')).to.equal(live.id);
    expect(
      await claimAll(new RetryQueue<Job>(db, clock, live, OPTIONS)),
      'due again for its claimer',
    ).to.deep.equal(['live']);
  });

  it('on one machine (replicas not sharing the database) takes at once every claim but its own', async () => {
    const [db] = replicas;
    await addJobs(db, ['predecessor']);
    // Killed a moment ago: its heartbeat still looks alive.
    expect(await claimAll(await queueOn(db))).to.deep.equal(['predecessor']);
    const starting = new RetryQueue<Job>(
      db,
      clock,
      await register(db, { ...SHARED, shared: false }),
      OPTIONS,
    );
    expect(await claimAll(starting)).to.deep.equal(['predecessor']);
    expect(await claimAll(starting), 'its own claim is its own').to.deep.equal([]);
  });

  it('renews the claim while its handler runs: a row worked on longer than a claim stays with its replica', async () => {
    const [db, other] = replicas;
    const short = { ...OPTIONS, claimMs: 300 };
    await addJobs(db, ['slow']);
    const otherQueue = await queueOn(other, short);
    const working = await register(db);
    const worker = new RetryWorker<Job>({
      queue: new RetryQueue<Job>(db, clock, working, short),
      handle: async (job) => {
        // Time passes beyond the claim while the attempt runs (a slow RPC)...
        clock.advance(10 * short.claimMs);
        const renewedUntil = clock.now().getTime() + short.claimMs;
        // ...and the claim follows it, renewed by the worker's timer.
        await eventually('the claim renewed', async () => {
          const row = (await db(TABLE).where({ id: job.id }).first('next_attempt_at')) as {
            next_attempt_at: number | string;
          };
          return Number(row.next_attempt_at) === renewedUntil;
        });
        expect(await claimAll(otherQueue), 'another replica finds it claimed').to.deep.equal([]);
        await db(TABLE).where({ id: job.id }).update({ state: 'done' });
      },
      intervalMs: 60_000,
      logger: quietLogger(),
      failure: 'retry test: pass failed',
    });
    await worker.pass();
    await worker.stop();
    expect(await claimerOf('slow')).to.equal(working.id);
  });

  it('runs one more pass when one is asked for during a pass, so a row made due meanwhile is not left', async () => {
    const [db] = replicas;
    await addJobs(db, ['first']);
    const handled: string[] = [];
    const worker: RetryWorker<Job> = new RetryWorker({
      queue: await queueOn(db),
      handle: async (job) => {
        handled.push(job.id);
        if (job.id !== 'first') return;
        // After this pass read the due rows: only a further pass can see it.
        await db(TABLE).insert({ id: 'second', state: 'open', created_at: 1 });
        void worker.pass();
      },
      intervalMs: 60_000,
      logger: quietLogger(),
      failure: 'retry test: pass failed',
    });
    await worker.pass();
    expect(handled).to.deep.equal(['first', 'second']);
    await worker.stop();
  });
});
