/** A daily job by the injected clock, in this process: a plugin's own (across replicas, lease each day's run). */
import type { Clock } from './services.ts';

/** A time of day in UTC, `HH:MM` (24-hour). */
export const UTC_TIME_OF_DAY = /^([01]\d|2[0-3]):([0-5]\d)$/;

/** The first instant strictly after `now` whose UTC time of day is `at` (`HH:MM`). */
export function nextDailyRun(now: Date, at: string): Date {
  const match = UTC_TIME_OF_DAY.exec(at);
  if (!match) throw new RangeError(`not a UTC time of day (HH:MM): ${at}`);
  const today = Date.UTC(
    now.getUTCFullYear(),
    now.getUTCMonth(),
    now.getUTCDate(),
    Number(match[1]),
    Number(match[2]),
  );
  // Strictly after: a run that just happened at 03:00:00.000 must not be due again at once.
  return new Date(today > now.getTime() ? today : today + 24 * 60 * 60 * 1000);
}

/**
 * A job run once a day at a UTC time of day, by the injected clock.
 *
 * Nothing here sleeps until the due time: `runDue()` compares `clock.now()` with the next run and runs
 * the job when it has come. In production a short poll calls it (`startPolling`), which also survives
 * what a single long timer would not (a suspended machine, a clock set forward); in tests a
 * ManualClock is moved past 03:00 and `runDue()` called directly.
 */
export class DailySchedule {
  private next: Date;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;

  constructor(
    private readonly clock: Clock,
    private readonly at: string,
    private readonly job: () => Promise<unknown>,
  ) {
    this.next = nextDailyRun(clock.now(), at);
  }

  /** When the job runs next. */
  get nextRun(): Date {
    return this.next;
  }

  /**
   * Runs the job if its time has come, then schedules the next run from the clock's time after the
   * job ended (a run that overran 03:00 next day does not run twice). True when it ran.
   * A missed day (the process was down) is not caught up: the next run is the next 03:00.
   */
  async runDue(): Promise<boolean> {
    if (this.running) return false;
    if (this.clock.now().getTime() < this.next.getTime()) return false;
    this.running = (async () => {
      try {
        await this.job();
      } finally {
        this.next = nextDailyRun(this.clock.now(), this.at);
      }
    })();
    try {
      await this.running;
    } finally {
      this.running = undefined;
    }
    return true;
  }

  /** Calls `runDue()` every `intervalMs`; the timer does not keep the process alive. */
  startPolling(intervalMs: number, onError: (err: unknown) => void): void {
    // A run in progress is not waited for: the new poll's runDue() skips while it lasts.
    if (this.timer) clearInterval(this.timer);
    this.timer = setInterval(() => this.runDue().catch(onError), intervalMs);
    this.timer.unref();
  }

  /** Stops polling and waits for a run in progress to end. */
  async stopPolling(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.running?.catch(() => undefined);
  }
}
