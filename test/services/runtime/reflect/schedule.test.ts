import { expect } from 'chai';
import {
  afterEachDue,
  nextOccurrence,
  type TimedSchedule,
} from '../../../../services/runtime/reflect/schedule.ts';

const at = (iso: string) => new Date(iso);
const next = (schedule: TimedSchedule, from: string) => nextOccurrence(schedule, at(from)).toISOString();

/** The first `count` occurrences after `from`, each strictly after the one before. */
function series(schedule: TimedSchedule, from: string, count: number): string[] {
  const out: Date[] = [];
  let cursor = at(from);
  for (let i = 0; i < count; i++) out.push((cursor = nextOccurrence(schedule, cursor)));
  return out.map((d) => d.toISOString());
}

describe('self-improvement schedules: occurrences in UTC', () => {
  it('daily: the next 00:00 UTC, strictly after (a run at midnight is not due again at once)', () => {
    expect(next('daily', '2026-03-18T12:00:00Z')).to.equal('2026-03-19T00:00:00.000Z');
    expect(next('daily', '2026-03-18T23:59:59.999Z')).to.equal('2026-03-19T00:00:00.000Z');
    expect(next('daily', '2026-03-19T00:00:00Z')).to.equal('2026-03-20T00:00:00.000Z');
    expect(next('daily', '2026-12-31T08:00:00Z')).to.equal('2027-01-01T00:00:00.000Z');
  });

  it('weekly: the next Monday 00:00 UTC', () => {
    expect(next('weekly', '2026-03-18T12:00:00Z')).to.equal('2026-03-23T00:00:00.000Z');
    expect(next('weekly', '2026-03-22T23:59:59Z')).to.equal('2026-03-23T00:00:00.000Z');
    expect(next('weekly', '2026-03-23T00:00:00Z')).to.equal('2026-03-30T00:00:00.000Z');
  });

  it('biweekly: every other Monday from the anchor (2026-01-05, 2026-01-19, …), two weeks apart across a 53-week ISO year', () => {
    expect(next('biweekly', '2026-01-01T00:00:00Z')).to.equal('2026-01-05T00:00:00.000Z');
    expect(next('biweekly', '2026-01-05T00:00:00Z')).to.equal('2026-01-19T00:00:00.000Z');
    // 2026 has ISO week 53: ISO week parity would put runs one or three weeks apart here.
    const runs = series('biweekly', '2026-11-01T00:00:00Z', 8);
    for (const run of runs) expect(new Date(run).getUTCDay()).to.equal(1);
    for (let i = 1; i < runs.length; i++)
      expect(Date.parse(runs[i] as string) - Date.parse(runs[i - 1] as string)).to.equal(14 * 86_400_000);
    expect(runs).to.include('2027-01-04T00:00:00.000Z').and.not.include('2026-12-28T00:00:00.000Z');
  });

  it('after_each: debounced after the latest message, never later than the max delay after the first', () => {
    const settings = { debounceMs: 60_000, maxDelayMs: 900_000 };
    expect(afterEachDue(0, 0, settings)).to.equal(60_000);
    expect(afterEachDue(0, 30_000, settings)).to.equal(90_000);
    expect(afterEachDue(0, 870_000, settings)).to.equal(900_000);
    // Past the max delay (a pass late), it is due now, not in the past.
    expect(afterEachDue(0, 1_000_000, settings)).to.equal(1_000_000);
  });
});
