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
 * Live delivery of runs' events to their open streams, after the store committed them. A stream
 * catches up from the store first (from `Last-Event-ID`), so a client that went away resumes where it
 * left off, and nothing is lost between what it read and what arrives live.
 */
export class RunEvents {
  private readonly listeners = new Map<string, Set<Listener>>();
  /** Ends each open stream with a `shutdown` event. */
  private readonly open = new Set<() => void>();
  private stopping = false;

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
   * Streams a run's events after `afterSeq` to `sse`: the stored ones, then live ones, until the run
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
    const buffered: RunEvent[] = [];
    let catchingUp = true;
    let finish: () => void = () => undefined;
    const done = new Promise<void>((resolve) => {
      finish = resolve;
    });
    /** Sends the events not sent yet, up to the run's end, in one write. */
    const send = (events: readonly RunEvent[]) => {
      const out: SseEvent[] = [];
      for (const event of events) {
        if (event.seq <= last || ended) continue;
        last = event.seq;
        out.push(streamed(event));
        if (event.type === RUN_ENDED) ended = true;
      }
      sse.sendJson(out);
      if (ended) finish();
    };
    const unsubscribe = this.subscribe(runId, (events) =>
      catchingUp ? buffered.push(...events) : send(events),
    );
    sse.signal.addEventListener('abort', () => finish(), { once: true });
    this.open.add(finish);
    try {
      if (!this.stopping) {
        send(await store.events(runId, afterSeq));
        catchingUp = false;
        send(buffered.splice(0));
        if (!sse.signal.aborted && !hasEnded && !this.stopping) await done;
      }
    } finally {
      this.open.delete(finish);
      unsubscribe();
      if (this.stopping && !ended) sse.sendJson([shutdownEvent(runId, last)]);
      sse.close();
    }
  }
}
