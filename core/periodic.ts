import type { Logger } from './log.ts';

/**
 * A pass never run twice at once: `run()` while one is under way answers that one, so work asked for
 * on demand and by a timer (or a lease) at the same moment is done once.
 */
export class SinglePass<T> {
  private running: Promise<T> | undefined;

  constructor(private readonly pass: () => Promise<T>) {}

  run(): Promise<T> {
    this.running ??= this.pass().finally(() => (this.running = undefined));
    return this.running;
  }

  /** Waits for the pass under way, if any (its failure is its caller's). */
  async settled(): Promise<void> {
    await this.running?.catch(() => undefined);
  }
}

/**
 * A background worker's pass, run every `intervalMs` once started and on demand, never two at once:
 * `run()` while a pass is under way answers that pass. A timed pass that fails is logged as `failure`
 * and tried again at the next tick; `stop()` clears the timer and waits for the pass under way. The
 * ticks are the process's timers: the injected Clock tells the time (what a pass compares with) but
 * keeps no timers, so a test moves a ManualClock and asks for a pass with `run()`.
 */
export class PeriodicPass<T> {
  private timer: NodeJS.Timeout | undefined;
  private readonly single: SinglePass<T>;

  constructor(
    private readonly options: {
      pass: () => Promise<T>;
      intervalMs: number;
      logger: Logger;
      /** The warning a failed timed pass logs (with the error's message). */
      failure: string;
    },
  ) {
    this.single = new SinglePass(options.pass);
  }

  run(): Promise<T> {
    return this.single.run();
  }

  start(): void {
    this.timer ??= setInterval(() => {
      this.run().catch((err: unknown) =>
        this.options.logger.warn({ err: (err as Error).message }, this.options.failure),
      );
    }, this.options.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.single.settled();
  }
}
