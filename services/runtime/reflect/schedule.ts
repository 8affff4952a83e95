import { Cron } from 'croner';
import type { Schedule } from './pipeline.ts';

/** The schedules that fall at fixed times; `after_each` follows chat messages instead. */
export type TimedSchedule = Exclude<Schedule, 'after_each'>;

const WEEK_MS = 7 * 86_400_000;

/**
 * Biweekly runs fall on the Mondays an even number of weeks after Monday 1970-01-05 00:00 UTC, the
 * first Monday of the Unix epoch (so on 2026-01-05, 2026-01-19, 2026-02-02, …). A fixed anchor, unlike ISO week
 * parity, keeps exactly two weeks between runs across years of 53 ISO weeks.
 */
export const BIWEEKLY_ANCHOR = new Date(Date.UTC(1970, 0, 5));

// Paused and without a function, a Cron only computes occurrences: it starts no timer.
const MIDNIGHTS = new Cron('0 0 * * *', { timezone: 'UTC', paused: true });
const MONDAYS = new Cron('0 0 * * 1', { timezone: 'UTC', paused: true });

function after(cron: Cron, from: Date): Date {
  const next = cron.nextRun(from);
  // Both patterns match every day or week, forever.
  if (next === null)
    throw new RangeError(`no occurrence of ${cron.getPattern()} after ${from.toISOString()}`);
  return next;
}

/**
 * The first occurrence strictly after `from`: daily at 00:00 UTC, weekly on Mondays at 00:00 UTC,
 * biweekly on every other of those Mondays (see BIWEEKLY_ANCHOR).
 */
export function nextOccurrence(schedule: TimedSchedule, from: Date): Date {
  if (schedule === 'daily') return after(MIDNIGHTS, from);
  const monday = after(MONDAYS, from);
  if (schedule === 'weekly') return monday;
  const weeks = Math.round((monday.getTime() - BIWEEKLY_ANCHOR.getTime()) / WEEK_MS);
  return weeks % 2 === 0 ? monday : after(MONDAYS, monday);
}

/**
 * When an after_each run is due, given the first chat message it waits for (`pendingSince`) and
 * the latest (`now`): `debounceMs` after the latest, but no later than `maxDelayMs` after the first.
 */
export function afterEachDue(
  pendingSince: number,
  now: number,
  settings: { debounceMs: number; maxDelayMs: number },
): number {
  return Math.max(now, Math.min(now + settings.debounceMs, pendingSince + settings.maxDelayMs));
}
