import { expect } from 'chai';
import { DailySchedule, nextDailyRun } from '@sigil/plugin-api/schedule';
import { ManualClock } from '../../../core/clock.ts';

describe('plugin API: the daily schedule (the package refresh of the gateway)', () => {
  it('computes the next 03:00 UTC strictly after now', () => {
    const next = (now: string) => nextDailyRun(new Date(now), '03:00').toISOString();
    expect(next('2026-05-10T00:00:00Z')).to.equal('2026-05-10T03:00:00.000Z');
    expect(next('2026-05-10T02:59:59.999Z')).to.equal('2026-05-10T03:00:00.000Z');
    expect(next('2026-05-10T03:00:00Z')).to.equal('2026-05-11T03:00:00.000Z');
    expect(next('2026-05-10T22:00:00-05:00')).to.equal('2026-05-12T03:00:00.000Z'); // 03:00 UTC on the 11th
    expect(next('2026-12-31T04:00:00Z')).to.equal('2027-01-01T03:00:00.000Z');
    expect(next('2028-02-28T12:00:00Z')).to.equal('2028-02-29T03:00:00.000Z');
    expect(nextDailyRun(new Date('2026-05-10T12:00:00Z'), '23:45').toISOString()).to.equal(
      '2026-05-10T23:45:00.000Z',
    );
    expect(() => nextDailyRun(new Date(), '3am')).to.throw(RangeError);
  });

  it('runs the job when the clock reaches the time, once a day, without sleeping', async () => {
    const clock = new ManualClock(new Date('2026-05-10T01:00:00Z'));
    const runs: string[] = [];
    const schedule = new DailySchedule(clock, '03:00', async () => {
      runs.push(clock.now().toISOString());
      clock.advance(5 * 60_000); // the job takes five minutes
    });
    expect(await schedule.runDue()).to.equal(false);
    clock.set(new Date('2026-05-10T03:00:00Z'));
    expect(await schedule.runDue()).to.equal(true);
    expect(await schedule.runDue()).to.equal(false);
    expect(schedule.nextRun.toISOString()).to.equal('2026-05-11T03:00:00.000Z');
    // Two days later (the process was asleep): one run, not one per missed day.
    clock.set(new Date('2026-05-13T09:00:00Z'));
    expect(await schedule.runDue()).to.equal(true);
    expect(await schedule.runDue()).to.equal(false);
    expect(runs).to.deep.equal(['2026-05-10T03:00:00.000Z', '2026-05-13T09:00:00.000Z']);
    expect(schedule.nextRun.toISOString()).to.equal('2026-05-14T03:00:00.000Z');
  });

  it('schedules the next run even when the job fails', async () => {
    const clock = new ManualClock(new Date('2026-05-10T02:00:00Z'));
    const schedule = new DailySchedule(clock, '03:00', () => Promise.reject(new Error('registry down')));
    clock.advance(60 * 60_000);
    let failure: unknown;
    await schedule.runDue().catch((err: unknown) => (failure = err));
    expect(failure).to.be.instanceOf(Error);
    expect(schedule.nextRun.toISOString()).to.equal('2026-05-11T03:00:00.000Z');
  });
});
