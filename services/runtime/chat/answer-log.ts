import type { SseStream } from '../../../core/http/sse.ts';
import type { Logger } from '../../../core/log.ts';
import {
  type AnswerEvents,
  asSseEvent,
  type EventChunk,
  eventChunk,
  type NumberedEvent,
} from './answer-events.ts';
import type { SessionCipher } from './history-keys.ts';

/** Events are stored this long after the first one not yet stored, … */
const FLUSH_MS = 10;
/** … or as soon as this many wait: a write of a few events, never one per token. */
const FLUSH_EVENTS = 64;
/** A write that failed is tried again after this long. */
const RETRY_MS = 200;
/** Beyond this many events not yet stored (the database slow or away), the answer waits for them. */
const MAX_UNSTORED = 4096;

/**
 * One answer's stream: each event is sent to the live client at once, with its number as the SSE
 * id, and stored soon after, off the hot path: in writes of at most FLUSH_EVENTS events, FLUSH_MS after
 * the first that waits, one write at a time and in order, sealed under the session's data key. A
 * failed write is tried again; memory stays bounded (MAX_UNSTORED, see `room`). The end stores the
 * last event with everything before it, marks the answer ended, and only then sends it.
 */
export class AnswerLog {
  private next: number;
  /** Sent, not yet cut into a chunk. */
  private buffered: NumberedEvent[] = [];
  /** Cut, waiting to be written, in order. */
  private readonly chunks: { chunk: EventChunk; size: number }[] = [];
  private unstored = 0;
  private flushTimer: NodeJS.Timeout | undefined;
  /** Set while a failed write waits to be tried again. */
  private retryTimer: NodeJS.Timeout | undefined;
  private writing: Promise<void> | undefined;
  /** A write failed and none succeeded since (warned once). */
  private failing = false;
  /** `end` writes what is left: the writes in the background stop. */
  private ending = false;
  private readonly waiting = new Set<() => void>();

  constructor(
    private readonly options: {
      store: AnswerEvents;
      answerId: string;
      firstSeq: number;
      cipher: SessionCipher | undefined;
      sse: SseStream;
      logger: Logger;
    },
  ) {
    this.next = options.firstSeq;
  }

  /** Sends the event to the live client (if still there) and stores it soon. */
  send(event: string, data: unknown): void {
    const numbered = { seq: this.next++, event, json: JSON.stringify(data) };
    this.options.sse.sendJson([asSseEvent(numbered)]);
    this.buffered.push(numbered);
    this.unstored++;
    if (this.buffered.length >= FLUSH_EVENTS) this.flush();
    else this.flushTimer ??= setTimeout(() => this.flush(), FLUSH_MS);
  }

  /**
   * Undefined while fewer than MAX_UNSTORED events wait to be stored; else a promise of room, which
   * `signal` aborting rejects: the answer waits rather than hold an unbounded backlog.
   */
  room(signal: AbortSignal): Promise<void> | undefined {
    if (this.unstored < MAX_UNSTORED) return undefined;
    return new Promise((resolve, reject) => {
      const stop = () => {
        this.waiting.delete(resume);
        reject(signal.reason as Error);
      };
      const resume = () => {
        signal.removeEventListener('abort', stop);
        resolve();
      };
      if (signal.aborted) return stop();
      this.waiting.add(resume);
      signal.addEventListener('abort', stop, { once: true });
    });
  }

  /**
   * The answer's end: `last` (its `done`, when it has one) is stored with every event before it and
   * the answer marked ended, then sent, and the live stream closes. A store that fails is logged: the
   * live client still gets every event.
   */
  async end(last?: { event: string; data: unknown }): Promise<void> {
    this.ending = true;
    clearTimeout(this.flushTimer);
    clearTimeout(this.retryTimer);
    const final = last && { seq: this.next++, event: last.event, json: JSON.stringify(last.data) };
    if (final) this.buffered.push(final);
    this.cut();
    await this.writing;
    try {
      for (let i = 0; i < this.chunks.length; i++) {
        const { chunk } = this.chunks[i] as { chunk: EventChunk };
        await this.options.store.write(this.options.answerId, chunk, i === this.chunks.length - 1);
      }
      if (this.chunks.length === 0) await this.options.store.write(this.options.answerId, undefined, true);
    } catch (err) {
      this.options.logger.error(
        { err, answerId: this.options.answerId },
        'chat: storing the end of an answer’s events failed; a resumed stream will not see its end',
      );
    }
    this.chunks.length = 0;
    this.unstored = 0;
    this.wake();
    if (final) this.options.sse.sendJson([asSseEvent(final)]);
    this.options.sse.close();
  }

  /** Cuts what is buffered into a chunk and writes the chunks waiting, unless a write is under way. */
  private flush(): void {
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    this.cut();
    this.store();
  }

  private cut(): void {
    if (this.buffered.length === 0) return;
    const events = this.buffered.splice(0);
    this.chunks.push({
      chunk: eventChunk(this.options.answerId, events, this.options.cipher),
      size: events.length,
    });
  }

  private store(): void {
    if (this.writing || this.retryTimer || this.ending) return;
    this.writing = this.writeChunks().finally(() => {
      this.writing = undefined;
      if (this.chunks.length > 0) this.store();
    });
  }

  /** Writes the chunks in order (until `end` takes over); on a failure, stops and tries again RETRY_MS later. */
  private async writeChunks(): Promise<void> {
    for (let head = this.chunks[0]; head && !this.ending; head = this.chunks[0]) {
      try {
        await this.options.store.write(this.options.answerId, head.chunk, false);
      } catch (err) {
        if (!this.failing)
          this.options.logger.warn(
            { err, answerId: this.options.answerId },
            'chat: storing an answer’s events failed; trying again',
          );
        this.failing = true;
        if (!this.ending)
          this.retryTimer = setTimeout(() => {
            this.retryTimer = undefined;
            this.store();
          }, RETRY_MS);
        return;
      }
      this.failing = false;
      this.chunks.shift();
      this.unstored -= head.size;
      if (this.unstored < MAX_UNSTORED) this.wake();
    }
  }

  private wake(): void {
    for (const resume of this.waiting) resume();
    this.waiting.clear();
  }
}
