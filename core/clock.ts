import type { Clock } from '@sigil/plugin-api';

/** Time is injected (the plugin API's Clock) so expiries, budgets and schedules are testable without sleeping. */
export type { Clock };

export const systemClock: Clock = { now: () => new Date() };

/** A clock that stands still until told to move; for tests and simulations. */
export class ManualClock implements Clock {
  private current: number;

  constructor(start: Date | number = Date.now()) {
    this.current = typeof start === 'number' ? start : start.getTime();
  }

  now(): Date {
    return new Date(this.current);
  }

  advance(ms: number): void {
    this.current += ms;
  }

  set(to: Date): void {
    this.current = to.getTime();
  }
}

export const unixSeconds = (clock: Clock): number => Math.floor(clock.now().getTime() / 1000);
