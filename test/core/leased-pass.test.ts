import { expect } from 'chai';
import { isLeaseLost } from '@sigil/plugin-api';
import { ManualClock } from '../../core/clock.ts';
import type { Database } from '../../core/db/database.ts';
import { LeasedPass, type HeldLease } from '../../core/db/leased-pass.ts';
import { DatabaseLeases } from '../../core/db/leases.ts';
import { eventually } from '../support/eventually.ts';
import { describeEachDatabase, openTwoHandles, quietLogger, type TwoHandles } from '../support/kernel.ts';

const INTERVAL_MS = 600_000;
const LEASE_MS = 300;
/** A slot's start: 10:00 UTC, a multiple of the interval. */
const SLOT_START = Date.UTC(2026, 2, 18, 10, 0, 0);

describeEachDatabase('core: a pass leased per interval', (database) => {
  let two: TwoHandles;
  let handles: [Database, Database];
  let passes: LeasedPass[];

  beforeEach(async () => {
    two = await openTwoHandles(database);
    handles = two.handles;
    passes = [];
  });

  afterEach(async () => {
    await Promise.all(passes.map((pass) => pass.stop()));
    await two.close();
  });

  /** The pass of replica `holder` on handle `at`, its clock `clock`, running `job` (`timing`: its slots). */
  const replica = (
    at: 0 | 1,
    holder: string,
    clock: ManualClock,
    job: (held: HeldLease) => Promise<unknown>,
    timing: { intervalMs?: number; phaseMs?: number; first?: 'next' } = {},
  ): LeasedPass => {
    const pass = new LeasedPass({
      leases: new DatabaseLeases(handles[at]),
      holder,
      name: 'test:job',
      job,
      intervalMs: INTERVAL_MS,
      leaseMs: LEASE_MS,
      ...timing,
      clock,
      logger: quietLogger(),
      failure: 'leased pass test: the job failed',
    });
    passes.push(pass);
    return pass;
  };
  const slotOf = (clock: ManualClock) => Math.floor(clock.now().getTime() / INTERVAL_MS);

  it('runs a daily job at its time of day from the next one on, once across replicas, and says when', async () => {
    const DAY_MS = 86_400_000;
    const at = (iso: string) => new Date(iso).getTime();
    // Made at 02:59 and (a clock 2 s behind) 02:58:58, for a job due daily at 03:00 UTC.
    const clocks = [
      new ManualClock(at('2026-03-18T02:59:00Z')),
      new ManualClock(at('2026-03-18T02:58:58Z')),
    ] as const;
    const ran: number[] = [];
    const [a, b] = clocks.map((clock, index) =>
      replica(index as 0 | 1, `replica-${index}`, clock, async () => void ran.push(clock.now().getTime()), {
        intervalMs: DAY_MS,
        phaseMs: 3 * 3_600_000,
        first: 'next',
      }),
    ) as [LeasedPass, LeasedPass];
    expect([a.nextRun, b.nextRun].map((when) => when.toISOString())).to.deep.equal([
      '2026-03-18T03:00:00.000Z',
      '2026-03-18T03:00:00.000Z',
    ]);
    expect(await Promise.all([a.runDue(), b.runDue()]), 'not before 03:00').to.deep.equal([false, false]);
    for (const clock of clocks) clock.advance(61_000);
    expect((await Promise.all([a.runDue(), b.runDue()])).filter(Boolean)).to.have.length(1);
    for (const clock of clocks) clock.advance(3_600_000);
    expect(await Promise.all([a.runDue(), b.runDue()]), 'once that day').to.deep.equal([false, false]);
    expect(ran).to.have.length(1);
    expect(a.nextRun.toISOString()).to.equal('2026-03-19T03:00:00.000Z');
    for (const clock of clocks) clock.advance(DAY_MS);
    expect((await Promise.all([a.runDue(), b.runDue()])).filter(Boolean), 'and the next day').to.have.length(
      1,
    );
  });

  it('runs each interval on exactly one replica, whenever their timers fire and however their clocks differ a little', async () => {
    // Made mid-slot, at 09:55 and (a clock 3 s ahead) 09:55:03.
    const clocks = [new ManualClock(SLOT_START - 300_000), new ManualClock(SLOT_START - 297_000)] as const;
    const ran: { holder: string; slot: number }[] = [];
    const [a, b] = (['a', 'b'] as const).map((holder, at) =>
      replica(at as 0 | 1, holder, clocks[at]!, async () => {
        ran.push({ holder, slot: slotOf(clocks[at]!) });
      }),
    ) as [LeasedPass, LeasedPass];
    // Neither runs within an interval of its start: not the slot it was made in, nor the next.
    for (const at of [0, 600_000]) {
      for (const clock of clocks) clock.advance(at);
      expect(await Promise.all([a.runDue(), b.runDue()]), `${at} ms later`).to.deep.equal([false, false]);
    }
    for (let round = 0; round < 3; round += 1) {
      for (const clock of clocks) clock.advance(INTERVAL_MS);
      const firstLook = await Promise.all([a.runDue(), b.runDue()]);
      expect(firstLook.filter(Boolean), `round ${round}`).to.have.length(1);
      // Later looks in the same slot, from either side, find it done.
      for (const clock of clocks) clock.advance(60_000);
      expect(await Promise.all([a.runDue(), b.runDue()])).to.deep.equal([false, false]);
    }
    const firstSlot = slotOf(clocks[0]) - 2;
    expect(firstSlot * INTERVAL_MS).to.equal(SLOT_START + INTERVAL_MS);
    expect(ran.map((run) => run.slot)).to.deep.equal([firstSlot, firstSlot + 1, firstSlot + 2]);
  });

  it("takes over a slot whose holder died mid-job, once its lease expires by the database's clock", async () => {
    const clock = new ManualClock(SLOT_START - INTERVAL_MS);
    const ran: string[] = [];
    const survivor = replica(1, 'survivor', clock, async () => void ran.push('survivor'));
    clock.advance(INTERVAL_MS);
    // The dead replica took this slot's lease and never renewed it.
    const leases = new DatabaseLeases(handles[0]);
    expect(await leases.acquire(`test:job:${slotOf(clock)}`, 'dead', LEASE_MS)).to.include({ fence: 1 });
    expect(await survivor.runDue()).to.equal(false);
    await eventually('the slot taken over', () => survivor.runDue());
    expect(ran).to.deep.equal(['survivor']);
    expect(await survivor.runDue(), 'and run once').to.equal(false);
  });

  it('renews its lease while the job runs, and stops the job, its writes refused, once the lease is lost', async () => {
    const clock = new ManualClock(SLOT_START - INTERVAL_MS);
    let fenced: unknown;
    let started: () => void = () => undefined;
    const running = new Promise<void>((resolve) => (started = resolve));
    const pass = replica(0, 'holder', clock, async (held) => {
      started();
      // Longer than the lease, renewed meanwhile: the job still holds it.
      const name = held.lease.name;
      const renewed = async () =>
        Number(
          ((await handles[1]('leases').where({ name }).first('expires_at')) as { expires_at: number })
            .expires_at,
        );
      const first = await renewed();
      await eventually('a renewal', async () => (await renewed()) > first);
      await held.fenced((trx) => trx('leases').where({ name }).first());
      // Another replica takes it (as after this one paused past its expiry).
      await handles[1]('leases')
        .where({ name })
        .update({ holder: 'thief', fence: held.lease.fence + 1 });
      await new Promise((resolve) => held.signal.addEventListener('abort', resolve));
      fenced = await held.fenced(async () => 'written').catch((err: unknown) => err);
      held.signal.throwIfAborted();
    });
    clock.advance(INTERVAL_MS);
    const ran = pass.runDue();
    await running;
    expect(await ran).to.equal(true);
    expect(isLeaseLost(fenced), String(fenced)).to.equal(true);
    const row = (await handles[0]('leases').first('holder')) as { holder: string };
    expect(row.holder, "the thief's lease is left alone").to.equal('thief');
  });

  it('counts a failed job as its slot done: the next slot tries again', async () => {
    const clock = new ManualClock(SLOT_START - INTERVAL_MS);
    let attempts = 0;
    const pass = replica(0, 'holder', clock, async () => {
      attempts += 1;
      if (attempts === 1) throw new Error('RPC down');
    });
    clock.advance(INTERVAL_MS);
    const failure = await pass.runDue().catch((err: unknown) => err);
    expect((failure as Error).message).to.equal('RPC down');
    expect(await pass.runDue()).to.equal(false);
    clock.advance(INTERVAL_MS);
    expect(await pass.runDue()).to.equal(true);
    expect(attempts).to.equal(2);
  });
});
