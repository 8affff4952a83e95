/**
 * Keeps a claim (a lease, a queue row, a chat session) while work runs: `renew` is called every third
 * of the claim's lifetime, so two renewals can fail before it runs out. When `renew` answers false the
 * claim is lost: the renewals end and `signal` aborts (with `lost()`). A renewal that throws (the
 * database unreachable) goes to `failed` and is tried again at the next third.
 */
export class Renewal {
  private readonly lost = new AbortController();
  private readonly timer: NodeJS.Timeout;

  constructor(
    lifetimeMs: number,
    renew: () => Promise<boolean>,
    options: { lost?: () => Error; failed?: (err: unknown) => void } = {},
  ) {
    this.timer = setInterval(() => {
      renew().then(
        (held) => {
          if (held) return;
          this.stop();
          this.lost.abort(options.lost?.());
        },
        (err: unknown) => options.failed?.(err),
      );
    }, lifetimeMs / 3);
    this.timer.unref();
  }

  /** Aborted once a renewal found the claim lost. */
  get signal(): AbortSignal {
    return this.lost.signal;
  }

  /** Ends the renewals (the work is done). */
  stop(): void {
    clearInterval(this.timer);
  }
}
