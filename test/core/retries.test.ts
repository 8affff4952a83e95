import { expect } from 'chai';
import { ManualClock } from '../../core/clock.ts';
import { openDatabase, type Database } from '../../core/db/database.ts';
import { doublingBackoff, RetryQueue, RetryWorker, type RetryQueueOptions } from '../../core/db/retries.ts';
import { describeEachDatabase, quietLogger } from '../support/kernel.ts';

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
  let cleanup: () => Promise<void>;
  /** Two handles on one database, as two replicas have. */
  let replicas: [Database, Database];
  let clock: ManualClock;

  beforeEach(async () => {
    const fresh = database.fresh();
    const open = () => openDatabase({ url: fresh.url, ...(fresh.schema ? { schema: fresh.schema } : {}) });
    replicas = [await open(), await open()];
    await createTable(replicas[0]);
    clock = new ManualClock(new Date('2025-01-01T00:00:00Z'));
    cleanup = async () => {
      await Promise.all(replicas.map((db) => db.destroy()));
      await fresh.cleanup();
    };
  });

  afterEach(() => cleanup());

  it('gives racing replicas disjoint rows, and together every due row', async () => {
    const ids = Array.from({ length: 30 }, (_, at) => `job-${String(at).padStart(2, '0')}`);
    await addJobs(replicas[0], ids);
    const [a, b] = replicas.map((db) => new RetryQueue<Job>(db, clock, OPTIONS).claimDue());
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
    expect(await claimAll(new RetryQueue<Job>(replicas[1], clock, OPTIONS))).to.deep.equal([]);
  });

  it('waits out the backoff after each failed attempt, doubling, by the injected clock', async () => {
    const [db] = replicas;
    const queue = new RetryQueue<Job>(db, clock, OPTIONS);
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
    const queue = new RetryQueue<Job>(db, clock, OPTIONS);
    await addJobs(db, ['claimed', 'later']);
    await addJobs(db, ['finished'], 'done');
    expect(await claimAll(queue)).to.deep.equal(['claimed', 'later']);
    await queue.later('later', CLAIM_MS * 2);
    clock.advance(CLAIM_MS - 1);
    expect(await claimAll(queue)).to.deep.equal([]);
    clock.advance(1);
    expect(await claimAll(queue)).to.deep.equal(['claimed']);
    expect(await queue.makeAllDue()).to.equal(2);
    expect(await claimAll(queue)).to.deep.equal(['claimed', 'later']);
  });

  it('runs one more pass when one is asked for during a pass, so a row made due meanwhile is not left', async () => {
    const [db] = replicas;
    await addJobs(db, ['first']);
    const handled: string[] = [];
    const worker: RetryWorker<Job> = new RetryWorker({
      queue: new RetryQueue<Job>(db, clock, OPTIONS),
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
