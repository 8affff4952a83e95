import { expect } from 'chai';
import { describeEachDatabase } from '../../../support/kernel.ts';
import type { WalletSettingsDocument } from '../../../../services/runtime/reflect/settings.ts';
import { openReplicas, principalOf, randomWallet, type Replica } from './support.ts';

const MINUTE = 60_000;
const iso = (value: Date | null) => value?.toISOString() ?? null;
const choose = (schedule: WalletSettingsDocument['selfImprovement']['schedule'], enabled = true) => ({
  selfImprovement: { enabled, useInChats: true, schedule },
});

describe('self-improvement scheduler: schedules, claims, leases (a moved clock, passes driven by the test)', function () {
  this.timeout(120_000);

  describeEachDatabase('reflect scheduler', (database) => {
    let world: Awaited<ReturnType<typeof openReplicas>>;
    afterEach(() => world?.close());

    /** The runs of `wallet` in the database, oldest first. */
    const runsOf = async (replica: Replica, wallet: string) =>
      (await replica.reflect.history(wallet, { limit: 200 })).runs.reverse();

    it('daily: a wallet that chatted runs at the next 00:00 UTC once, then the next day; nothing before', async () => {
      world = await openReplicas(database);
      const replica = await world.replica();
      const wallet = randomWallet();
      expect((await replica.reflect.status(wallet)).nextRunAt).to.equal(null);
      await replica.reflect.chatted(wallet);
      expect(iso((await replica.reflect.status(wallet)).nextRunAt)).to.equal('2026-03-19T00:00:00.000Z');

      world.clock.set(new Date('2026-03-18T23:59:59Z'));
      expect((await replica.reflect.scheduler.pass()).queued).to.deep.equal([]);
      world.clock.set(new Date('2026-03-19T00:00:00Z'));
      const pass = await replica.reflect.scheduler.pass();
      expect(pass.queued).to.have.length(1);
      expect(pass.started).to.deep.equal(pass.queued);
      await replica.reflect.scheduler.settled();
      expect(world.pipeline.jobs.map((job) => [job.wallet, job.trigger, job.runId])).to.deep.equal([
        [wallet, 'schedule', pass.queued[0]],
      ]);
      const status = await replica.reflect.status(wallet);
      expect(iso(status.nextRunAt)).to.equal('2026-03-20T00:00:00.000Z');
      expect(status.lastRun?.status).to.equal('succeeded');
      expect(status.lastRun?.trigger).to.equal('schedule');
      expect(status.lastRun?.pipelineVersion).to.equal(world.pipeline.version);
      expect(status.counts).to.deep.equal({ facets: 2, learnings: 1, skills: 0 });

      // Passes the same day find nothing due; the next midnight runs again.
      world.clock.set(new Date('2026-03-19T18:00:00Z'));
      expect((await replica.reflect.scheduler.pass()).queued).to.deep.equal([]);
      world.clock.set(new Date('2026-03-20T00:00:01Z'));
      expect((await replica.reflect.scheduler.pass()).queued).to.have.length(1);
      await replica.reflect.scheduler.settled();
      expect(world.pipeline.jobs).to.have.length(2);
    });

    it('weekly and biweekly survive a restart: a new scheduler on the same database runs them on time', async () => {
      world = await openReplicas(database);
      const before = await world.replica();
      const weekly = randomWallet();
      const biweekly = randomWallet();
      await before.reflect.replaceSettings(weekly, choose('weekly'));
      await before.reflect.replaceSettings(biweekly, choose('biweekly'));
      // Wednesday 2026-03-18: the next Monday is 03-23 (an odd week after the anchor), so biweekly is 03-30.
      expect(iso(await before.reflect.schedules.nextRunAt(weekly))).to.equal('2026-03-23T00:00:00.000Z');
      expect(iso(await before.reflect.schedules.nextRunAt(biweekly))).to.equal('2026-03-30T00:00:00.000Z');
      await before.close();

      const after = await world.replica();
      expect((await after.reflect.settings(biweekly)).selfImprovement.schedule).to.equal('biweekly');
      world.clock.set(new Date('2026-03-23T00:00:00Z'));
      const monday = await after.reflect.scheduler.pass();
      await after.reflect.scheduler.settled();
      expect(world.pipeline.jobs.map((job) => job.wallet)).to.deep.equal([weekly]);
      expect(monday.queued).to.have.length(1);
      expect(iso(await after.reflect.schedules.nextRunAt(weekly))).to.equal('2026-03-30T00:00:00.000Z');

      world.clock.set(new Date('2026-03-30T00:00:00Z'));
      await after.reflect.scheduler.pass();
      await after.reflect.scheduler.settled();
      expect(world.pipeline.jobs.map((job) => job.wallet)).to.have.members([weekly, weekly, biweekly]);
      expect(iso(await after.reflect.schedules.nextRunAt(biweekly))).to.equal('2026-04-13T00:00:00.000Z');
    });

    it('missed occurrences (no replica ran for days) make one run, then the schedule goes on from now', async () => {
      world = await openReplicas(database);
      const replica = await world.replica();
      const wallet = randomWallet();
      await replica.reflect.replaceSettings(wallet, choose('daily'));
      world.clock.set(new Date('2026-03-22T15:00:00Z'));
      expect((await replica.reflect.scheduler.pass()).queued).to.have.length(1);
      expect((await replica.reflect.scheduler.pass()).queued).to.have.length(0);
      await replica.reflect.scheduler.settled();
      expect(world.pipeline.jobs).to.have.length(1);
      expect(iso(await replica.reflect.schedules.nextRunAt(wallet))).to.equal('2026-03-23T00:00:00.000Z');
    });

    it('after_each: 60 s after the last message, pushed back by each further one up to 15 min after the first', async () => {
      world = await openReplicas(database);
      const replica = await world.replica();
      const wallet = randomWallet();
      await replica.reflect.replaceSettings(wallet, choose('after_each'));
      const start = world.clock.now().getTime();
      const due = async () => (await replica.reflect.schedules.nextRunAt(wallet))?.getTime();
      // The switch itself counts as a message: what was chatted before is run for.
      expect(await due()).to.equal(start + MINUTE);
      world.clock.advance(30_000);
      await replica.reflect.chatted(wallet);
      expect(await due()).to.equal(start + 30_000 + MINUTE);
      // A message every 50 s keeps pushing it back, but never past 15 minutes after the first
      // (the last, at 14 min 40 s, would put it at 15 min 40 s).
      for (let i = 0; i < 17; i++) {
        world.clock.advance(50_000);
        expect((await replica.reflect.scheduler.pass()).queued, `pass ${i}`).to.deep.equal([]);
        await replica.reflect.chatted(wallet);
        expect(await due()).to.be.at.most(start + 15 * MINUTE);
      }
      expect(await due()).to.equal(start + 15 * MINUTE);
      world.clock.set(new Date(start + 15 * MINUTE));
      expect((await replica.reflect.scheduler.pass()).queued).to.have.length(1);
      await replica.reflect.scheduler.settled();
      expect(await due()).to.equal(undefined);
      // Nothing more until the next message.
      world.clock.advance(60 * MINUTE);
      expect((await replica.reflect.scheduler.pass()).queued).to.deep.equal([]);
      await replica.reflect.chatted(wallet);
      world.clock.advance(MINUTE);
      expect((await replica.reflect.scheduler.pass()).queued).to.have.length(1);
      await replica.reflect.scheduler.settled();
      expect(world.pipeline.jobs.map((job) => job.trigger)).to.deep.equal(['schedule', 'schedule']);
    });

    it('after_each: messages during a running run wait for another run after it', async () => {
      world = await openReplicas(database);
      const replica = await world.replica();
      const wallet = randomWallet();
      await replica.reflect.replaceSettings(wallet, choose('after_each'));
      const held = world.pipeline.holdNext();
      world.clock.advance(MINUTE);
      await replica.reflect.scheduler.pass();
      await held.started;
      await replica.reflect.chatted(wallet);
      world.clock.advance(MINUTE);
      expect((await replica.reflect.scheduler.pass()).queued).to.deep.equal([]);
      expect(await replica.reflect.schedules.nextRunAt(wallet)).to.not.equal(null);
      held.release();
      await replica.reflect.scheduler.settled();
      world.clock.advance(MINUTE);
      expect((await replica.reflect.scheduler.pass()).queued).to.have.length(1);
      await replica.reflect.scheduler.settled();
      expect(world.pipeline.jobs).to.have.length(2);
    });

    it('after_each: a manual run takes the messages it waited for; none is left to run empty after it', async () => {
      world = await openReplicas(database);
      const replica = await world.replica();
      const wallet = randomWallet();
      await replica.reflect.replaceSettings(wallet, choose('after_each'));
      await replica.reflect.chatted(wallet);
      expect(await replica.reflect.schedules.nextRunAt(wallet)).to.not.equal(null);
      world.clock.advance(1000);
      await replica.reflect.trigger(principalOf(wallet, world.clock));
      await replica.reflect.scheduler.settled();
      expect(await replica.reflect.schedules.nextRunAt(wallet)).to.equal(null);
      world.clock.advance(10 * MINUTE);
      expect((await replica.reflect.scheduler.pass()).queued).to.deep.equal([]);
      // A message after the manual run is waited for again.
      await replica.reflect.chatted(wallet);
      world.clock.advance(MINUTE);
      expect((await replica.reflect.scheduler.pass()).queued).to.have.length(1);
      await replica.reflect.scheduler.settled();
      expect(world.pipeline.jobs.map((job) => job.trigger)).to.deep.equal(['manual', 'schedule']);
    });

    it('disabled: no run starts by itself, and enabling again schedules from now', async () => {
      world = await openReplicas(database);
      const replica = await world.replica();
      const wallet = randomWallet();
      await replica.reflect.chatted(wallet);
      await replica.reflect.replaceSettings(wallet, choose('daily', false));
      expect(await replica.reflect.schedules.nextRunAt(wallet)).to.equal(null);
      await replica.reflect.chatted(wallet);
      world.clock.advance(3 * 86_400_000);
      expect((await replica.reflect.scheduler.pass()).queued).to.deep.equal([]);
      await replica.reflect.replaceSettings(wallet, choose('weekly'));
      expect(iso(await replica.reflect.schedules.nextRunAt(wallet))).to.equal('2026-03-23T00:00:00.000Z');
    });

    it('two replicas racing for the same due occurrences: each wallet runs exactly once', async () => {
      world = await openReplicas(database);
      const a = await world.replica();
      const b = await world.replica();
      const wallets = Array.from({ length: 12 }, () => randomWallet());
      for (const wallet of wallets) await a.reflect.chatted(wallet);
      world.clock.set(new Date('2026-03-19T00:00:00Z'));
      // Both pass at once, again and again: what a pass left (a claim lost, the concurrency limit) the
      // next ones take.
      const queued: string[] = [];
      for (let i = 0; i < 10; i++) {
        const passes = await Promise.all([a.reflect.scheduler.pass(), b.reflect.scheduler.pass()]);
        queued.push(...passes.flatMap((pass) => pass.queued));
        await Promise.all([a.reflect.scheduler.settled(), b.reflect.scheduler.settled()]);
      }
      expect(queued).to.have.length(wallets.length);
      expect(world.pipeline.jobs.map((job) => job.wallet)).to.have.members(wallets);
      for (const wallet of wallets) {
        const runs = await runsOf(a, wallet);
        expect(runs.map((run) => [run.status, run.attempt])).to.deep.equal([['succeeded', 1]]);
      }
    });

    it('a replica slower than another (it read before the other took and ran them) takes neither the occurrence nor the run', async () => {
      world = await openReplicas(database);
      const fast = await world.replica();
      const slow = await world.replica();
      const wallet = randomWallet();
      await fast.reflect.chatted(wallet);
      world.clock.set(new Date('2026-03-19T00:00:00Z'));
      const [staleOccurrence] = await slow.reflect.schedules.due(10);
      const held = world.pipeline.holdNext();
      const { queued } = await fast.reflect.scheduler.pass();
      await held.started;
      const run = await fast.reflect.runs.get(queued[0] as string);
      held.release();
      await fast.reflect.scheduler.settled();
      expect(
        await slow.db.transaction((trx) => slow.reflect.schedules.take(trx, staleOccurrence!, null)),
      ).to.equal(false);
      const staleRun = { ...run!, status: 'queued' as const, attempt: 0 };
      expect(await slow.reflect.runs.claim(staleRun, 'v', 60_000)).to.equal(undefined);
      expect(await slow.reflect.runs.claim(run!, 'v', 60_000)).to.equal(undefined);
      expect(world.pipeline.jobs).to.have.length(1);
      expect(iso(await slow.reflect.schedules.nextRunAt(wallet))).to.equal('2026-03-20T00:00:00.000Z');
    });

    it('one run at a time per wallet: concurrent triggers on two replicas start one; the others get it', async () => {
      // A lease of a day: the run's replica makes no pass while the clock moves to midnight.
      world = await openReplicas(database, { settings: { leaseSeconds: 86_400 } });
      const a = await world.replica();
      const b = await world.replica();
      const wallet = randomWallet();
      const held = world.pipeline.holdNext();
      const answers = await Promise.all(
        [a, b, a, b].map((replica) => replica.reflect.trigger(principalOf(wallet, world.clock))),
      );
      expect(answers.filter((answer) => answer.created)).to.have.length(1);
      expect(new Set(answers.map((answer) => answer.run.id)).size).to.equal(1);
      const job = await held.started;
      expect(job.trigger).to.equal('manual');
      expect(job.principal?.address).to.equal(wallet);
      // A scheduled occurrence meanwhile is covered by the run under way, not a second one.
      await a.reflect.replaceSettings(wallet, choose('daily'));
      world.clock.set(new Date('2026-03-19T00:00:00Z'));
      expect((await b.reflect.scheduler.pass()).queued).to.deep.equal([]);
      held.release();
      await Promise.all([a.reflect.scheduler.settled(), b.reflect.scheduler.settled()]);
      expect(world.pipeline.jobs).to.have.length(1);
      const again = await b.reflect.trigger(principalOf(wallet, world.clock));
      expect(again.created).to.equal(true);
      await b.reflect.scheduler.settled();
      expect((await runsOf(a, wallet)).map((run) => run.status)).to.deep.equal(['succeeded', 'succeeded']);
    });

    it('waiting_for_unlock: no key, the run waits; retried on later passes; a session unlocking runs it with that session', async () => {
      world = await openReplicas(database, { settings: { lockedRetrySeconds: 600 } });
      const replica = await world.replica();
      const wallet = randomWallet();
      const unlockedSessions = new Set<string>();
      world.pipeline.key = (principal) =>
        Promise.resolve(principal?.session !== undefined && unlockedSessions.has(principal.session.id));
      await replica.reflect.chatted(wallet);
      world.clock.set(new Date('2026-03-19T00:00:00Z'));
      await replica.reflect.scheduler.pass();
      await replica.reflect.scheduler.settled();
      let current = (await replica.reflect.status(wallet)).currentRun;
      expect(current?.status).to.equal('waiting_for_unlock');
      expect(current?.error?.code).to.equal('forbidden');
      expect(current?.dueAt.toISOString()).to.equal('2026-03-19T00:10:00.000Z');

      // Not due yet: nothing; due: tried again (still no key), waiting again.
      world.clock.advance(5 * MINUTE);
      expect((await replica.reflect.scheduler.pass()).started).to.deep.equal([]);
      world.clock.advance(5 * MINUTE);
      expect((await replica.reflect.scheduler.pass()).started).to.have.length(1);
      await replica.reflect.scheduler.settled();
      current = (await replica.reflect.status(wallet)).currentRun;
      expect(current?.status).to.equal('waiting_for_unlock');
      expect(world.pipeline.jobs).to.have.length(2);

      const session = principalOf(wallet, world.clock);
      unlockedSessions.add(session.session!.id);
      await replica.reflect.unlocked(session);
      await replica.reflect.scheduler.settled();
      const status = await replica.reflect.status(wallet);
      expect(status.currentRun).to.equal(null);
      expect(status.lastRun?.id).to.equal(current?.id);
      expect(status.lastRun?.status).to.equal('succeeded');
      expect(status.lastRun?.attempt).to.equal(3);
      expect(world.pipeline.jobs.at(-1)?.principal).to.equal(session);
      // An unlock with nothing waiting starts nothing.
      await replica.reflect.unlocked(session);
      await replica.reflect.scheduler.settled();
      expect(world.pipeline.jobs).to.have.length(3);
    });

    it('a manual trigger on a waiting run tries it again at once with the caller', async () => {
      world = await openReplicas(database);
      const replica = await world.replica();
      const wallet = randomWallet();
      const first = principalOf(wallet, world.clock);
      const second = principalOf(wallet, world.clock);
      world.pipeline.key = (principal) => Promise.resolve(principal === second);
      const started = await replica.reflect.trigger(first);
      await replica.reflect.scheduler.settled();
      expect((await replica.reflect.runs.get(started.run.id))?.status).to.equal('waiting_for_unlock');
      const retried = await replica.reflect.trigger(second);
      expect(retried.created).to.equal(false);
      expect(retried.run.id).to.equal(started.run.id);
      await replica.reflect.scheduler.settled();
      expect((await replica.reflect.runs.get(started.run.id))?.status).to.equal('succeeded');
    });

    it('a replica that dies while running: its lease runs out, another resumes the run; the dead one records nothing', async () => {
      world = await openReplicas(database, { settings: { leaseSeconds: 120, passIntervalSeconds: 30 } });
      const a = await world.replica();
      const b = await world.replica();
      const wallet = randomWallet();
      const stalled = world.pipeline.holdNext();
      const { run } = await a.reflect.trigger(principalOf(wallet, world.clock));
      const jobA = await stalled.started;

      // Within the lease (renewed by A's passes), B takes nothing.
      world.clock.advance(100_000);
      await a.reflect.scheduler.pass();
      world.clock.advance(100_000);
      expect((await b.reflect.scheduler.pass()).started).to.deep.equal([]);
      // A makes no pass any more (as if it died): once its lease ends, B resumes the run.
      world.clock.advance(20_001);
      const resumed = world.pipeline.holdNext();
      expect((await b.reflect.scheduler.pass()).started).to.deep.equal([run.id]);
      const jobB = await resumed.started;
      expect(jobB.runId).to.equal(run.id);
      expect((await b.reflect.runs.get(run.id))?.resumes).to.equal(1);
      // A wakes up: its next pass finds the run taken and stops its work; its result is not recorded.
      await a.reflect.scheduler.pass();
      expect(jobA.signal.aborted).to.equal(true);
      stalled.release();
      await a.reflect.scheduler.settled();
      expect((await b.reflect.runs.get(run.id))?.status).to.equal('running');
      resumed.release();
      await b.reflect.scheduler.settled();
      const ended = await b.reflect.runs.get(run.id);
      expect([ended?.status, ended?.attempt, ended?.resumes]).to.deep.equal(['succeeded', 2, 1]);
      // The outcome is B's (the second call), not A's.
      expect(ended?.outcome?.produced.learnings).to.deep.equal(['learning-2']);
    });

    it('a run whose replica died more than maxResumes times is failed (run_abandoned), not resumed forever', async () => {
      world = await openReplicas(database, { settings: { maxResumes: 0, leaseSeconds: 60 } });
      const a = await world.replica();
      const b = await world.replica();
      const wallet = randomWallet();
      const stalled = world.pipeline.holdNext();
      const { run } = await a.reflect.trigger(principalOf(wallet, world.clock));
      await stalled.started;
      world.clock.advance(61_000);
      expect((await b.reflect.scheduler.pass()).abandoned).to.deep.equal([run.id]);
      const ended = await b.reflect.runs.get(run.id);
      expect([ended?.status, ended?.error?.code]).to.deep.equal(['failed', 'run_abandoned']);
      stalled.release();
      await a.reflect.scheduler.settled();
      expect((await b.reflect.runs.get(run.id))?.status).to.equal('failed');
      expect(world.pipeline.jobs).to.have.length(1);
    });

    it('a replica shutting down hands its run back (queued), and another runs it at its next pass', async () => {
      world = await openReplicas(database);
      const a = await world.replica();
      const b = await world.replica();
      const wallet = randomWallet();
      const held = world.pipeline.holdNext();
      const { run } = await a.reflect.trigger(principalOf(wallet, world.clock));
      const job = await held.started;
      await a.close();
      expect(job.signal.aborted).to.equal(true);
      expect((await b.reflect.runs.get(run.id))?.status).to.equal('queued');
      expect((await b.reflect.scheduler.pass()).started).to.deep.equal([run.id]);
      await b.reflect.scheduler.settled();
      const ended = await b.reflect.runs.get(run.id);
      expect([ended?.status, ended?.resumes, ended?.trigger]).to.deep.equal(['succeeded', 0, 'manual']);
    });

    it('a pipeline failure fails the run with its code; an unexpected error shows no detail', async () => {
      world = await openReplicas(database);
      const replica = await world.replica();
      const wallet = randomWallet();
      world.pipeline.key = () => Promise.reject(new Error('boom at /secret/path'));
      const { run } = await replica.reflect.trigger(principalOf(wallet, world.clock));
      await replica.reflect.scheduler.settled();
      const ended = await replica.reflect.runs.get(run.id);
      expect(ended?.status).to.equal('failed');
      expect(ended?.error?.code).to.equal('internal');
      expect(ended?.error?.message).to.not.include('secret');
      expect(ended?.outcome).to.equal(null);
    });
  });
});
