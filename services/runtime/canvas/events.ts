import type { SseEvent, SseStream } from '../../../core/http/sse.ts';
import type { RunEvent, RunStore } from './runs.ts';

/** The event that ends a run's stream: nothing follows it. */
export const RUN_ENDED = 'run.ended';

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
   * ends (or `hasEnded` said it had) or the client goes. Resolves once the stream is closed.
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
    try {
      send(await store.events(runId, afterSeq));
      catchingUp = false;
      send(buffered.splice(0));
      if (!sse.signal.aborted && !hasEnded) await done;
    } finally {
      unsubscribe();
      sse.close();
    }
  }
}
