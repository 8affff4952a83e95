/**
 * Budget windows are calendar windows in UTC, decided by the kernel's clock: a day starts at 00:00 UTC,
 * a week on Monday 00:00 UTC (ISO 8601 weeks), a month on the 1st at 00:00 UTC. A charge counts in the
 * windows that contain its `created_at`; at the end of a window its spend no longer counts, all at once.
 */
export const BUDGET_WINDOWS = ['daily', 'weekly', 'monthly'] as const;
export type BudgetWindow = (typeof BUDGET_WINDOWS)[number];

const DAY_MS = 86_400_000;

export interface WindowBounds {
  /** First millisecond in the window. */
  start: Date;
  /** First millisecond after it: when its spend stops counting. */
  resetsAt: Date;
}

export function windowBounds(window: BudgetWindow, now: Date): WindowBounds {
  const year = now.getUTCFullYear();
  const month = now.getUTCMonth();
  const day = Date.UTC(year, month, now.getUTCDate());
  switch (window) {
    case 'daily':
      return { start: new Date(day), resetsAt: new Date(day + DAY_MS) };
    case 'weekly': {
      // getUTCDay: 0 is Sunday; ISO weeks start on Monday.
      const sinceMonday = (now.getUTCDay() + 6) % 7;
      const start = day - sinceMonday * DAY_MS;
      return { start: new Date(start), resetsAt: new Date(start + 7 * DAY_MS) };
    }
    case 'monthly':
      return { start: new Date(Date.UTC(year, month, 1)), resetsAt: new Date(Date.UTC(year, month + 1, 1)) };
  }
}

/** The start of the calendar UTC day containing `now`, and the next one (withdrawals' daily total). */
export const utcDay = (now: Date): WindowBounds => windowBounds('daily', now);
