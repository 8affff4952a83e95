import type { SseStream } from '../../../core/http/sse.ts';
import type { RunEvent, RunStore } from './runs.ts';

/** The event that ends a run's stream: nothing follows it. */
export const RUN_ENDED = 'run.ended';

type Listener = (event: RunEvent) => void;

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
    for (const event of events) for (const listener of listeners) listener(event);
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
    const send = (event: RunEvent) => {
      if (event.seq <= last || ended) return;
      last = event.seq;
      sse.send(event.type, { ...event.data, seq: event.seq, at: event.at }, String(event.seq));
      if (event.type === RUN_ENDED) {
        ended = true;
        finish();
      }
    };
    const unsubscribe = this.subscribe(runId, (event) => (catchingUp ? buffered.push(event) : send(event)));
    sse.signal.addEventListener('abort', () => finish(), { once: true });
    try {
      for (const event of await store.events(runId, afterSeq)) send(event);
      catchingUp = false;
      for (const event of buffered.splice(0)) send(event);
      if (!sse.signal.aborted && !hasEnded) await done;
    } finally {
      unsubscribe();
      sse.close();
    }
  }
}
