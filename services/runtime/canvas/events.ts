import type { SseEvent, SseStream } from '../../../core/http/sse.ts';
import type { RunEvent, RunStore } from './runs.ts';

/** The event that ends a run's stream: nothing follows it. */
export const RUN_ENDED = 'run.ended';

/**
 * The event that ends a run's stream when the runtime stops before the run ended: the run is stored,
 * so the client reconnects (to this runtime once it is back) with `Last-Event-ID: lastEventId`. It has
 * no SSE id, so an EventSource keeps the last run event's.
 */
export const SHUTDOWN = 'shutdown';

const shutdownEvent = (runId: string, lastEventId: number): SseEvent => ({
  event: SHUTDOWN,
  json: JSON.stringify({ runId, lastEventId: String(lastEventId), reason: 'runtime_stopping' }),
});

type Listener = (events: readonly RunEvent[]) => void;

/**
 * An event as its stream sends it: its data with its number and time, `{ ...data, seq, at }`, made
 * from the stored text without parsing it (a data object's text ends in `}`).
 */
const streamed = ({ type, seq, at, json }: RunEvent): SseEvent => ({
  event: type,
  id: String(seq),
  json: `${json === '{}' ? '{' : `${json.slice(0, -1)},`}"seq":${seq},"at":"${at}"}`,
});

/**
 * Delivery of runs' events to their open streams. A stream catches up from the store first (from
 * `Last-Event-ID`), so a client that went away resumes where it left off, on any replica. Then the
 * events of a run this process executes come live, once committed; those of a run another replica
 * executes are read from the store every `pollMs`. A stream never skips nor repeats an event: events
 * arriving with a gap (the run changed hands, or came live while the catch-up read) are read from the
 * store in order instead.
 */
export class RunEvents {
  private readonly listeners = new Map<string, Set<Listener>>();
  /** Ends each open stream with a `shutdown` event. */
  private readonly open = new Set<() => void>();
  private stopping = false;

  constructor(
    /** How often a stream reads a run another replica executes from the store. */
    private readonly pollMs: number,
    /** Whether this process executes the run (its events come live). */
    private readonly executedHere: (runId: string) => boolean,
  ) {}

  /**
   * The runtime is stopping: every open stream gets a `shutdown` event and ends now, as does any
   * opened from here on (its run's events are stored; the client takes them up after the restart).
   */
  shutdown(): void {
    this.stopping = true;
    for (const stop of this.open) stop();
  }

  publish(runId: string, events: readonly RunEvent[]): void {
    const listeners = this.listeners.get(runId);
    if (!listeners) return;
    for (const listener of listeners) listener(events);
  }

  /** The run stopped being executed here: its streams read it from the store from now on. */
  changedHands(runId: string): void {
    this.publish(runId, []);
  }

  private subscribe(runId: string, listener: Listener): () => void {
    const listeners = this.listeners.get(runId) ?? new Set();
    listeners.add(listener);
    this.listeners.set(runId, listeners);
    return () => {
      listeners.delete(listener);
      if (listeners.size === 0) this.listeners.delete(runId);
    };
  }

  /**
   * Streams a run's events after `afterSeq` to `sse`: the stored ones, then later ones, until the run
   * ends (or `hasEnded` said it had), the client goes, or the runtime stops (see `shutdown`). Resolves
   * once the stream is closed.
   */
  async stream(
    store: RunStore,
    runId: string,
    afterSeq: number,
    sse: SseStream,
    hasEnded: boolean,
  ): Promise<void> {
    let last = afterSeq;
    let ended = false;
    const arrived: RunEvent[] = [];
    let wake: () => void = () => undefined;
    /** Sends the events not sent yet, up to the run's end, in one write. */
    const send = (events: readonly RunEvent[]) => {
      const out: SseEvent[] = [];
      for (const event of events) {
        if (event.seq !== last + 1 || ended) continue;
        last = event.seq;
        out.push(streamed(event));
        if (event.type === RUN_ENDED) ended = true;
      }
      sse.sendJson(out);
    };
    const done = () => ended || hasEnded || sse.signal.aborted || this.stopping;
    const unsubscribe = this.subscribe(runId, (events) => {
      arrived.push(...events);
      wake();
    });
    const stop = () => wake();
    sse.signal.addEventListener('abort', stop, { once: true });
    this.open.add(stop);
    try {
      if (!this.stopping) send(await store.events(runId, afterSeq));
      while (!done()) {
        await this.next(runId, arrived, done, (resolve) => (wake = resolve));
        wake = () => undefined;
        if (done()) break;
        const live = arrived.splice(0);
        send(live);
        // Nothing live (a poll, the run changed hands), or a gap: the store has them in order.
        if (!ended && (live.length === 0 || (live.at(-1) as RunEvent).seq > last))
          send(await store.events(runId, last));
      }
    } finally {
      this.open.delete(stop);
      unsubscribe();
      if (this.stopping && !ended) sse.sendJson([shutdownEvent(runId, last)]);
      sse.close();
    }
  }

  /**
   * Waits until events arrived live, the stream is `done`, or (for a run another replica executes)
   * `pollMs` passed; `onWake` is given what wakes it sooner.
   */
  private async next(
    runId: string,
    arrived: readonly RunEvent[],
    done: () => boolean,
    onWake: (resolve: () => void) => void,
  ): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      onWake(resolve);
      if (arrived.length > 0 || done()) resolve();
      else if (!this.executedHere(runId)) timer = setTimeout(resolve, this.pollMs);
    });
    clearTimeout(timer);
  }
}
