import type { Knex } from 'knex';
import type { SseStream } from '../../../core/http/sse.ts';
import type { Logger } from '../../../core/log.ts';
import {
  type AnswerEvents,
  type AnswerRef,
  asSseEvent,
  endMarker,
  type EventChunk,
  eventChunk,
  type NumberedEvent,
} from './answer-events.ts';
import type { SessionCipher } from './history-keys.ts';

/**
 * Events are stored this long after the first one not yet stored (half the poll of a resumed stream,
 * answer-follow.ts: a short answer is one write, with its end), …
 */
const FLUSH_MS = 50;
/** … or as soon as this many wait: a write of a few events, never one per token. */
const FLUSH_EVENTS = 64;
/** A write that failed is tried again after this long. */
const RETRY_MS = 200;
/** Beyond this many events not yet stored (the database slow or away), the answer waits for them. */
const MAX_UNSTORED = 4096;

/** One write of the answer: a chunk of its events, or (`size` 0) the answer alone. */
interface PendingWrite {
  chunk?: EventChunk;
  size: number;
}

/**
 * One answer's stream: each event is sent to the live client at once, with its number as the SSE
 * id, and stored soon after, off the hot path: in writes of at most FLUSH_EVENTS events, FLUSH_MS after
 * the first that waits, one write at a time and in order, sealed under the session's data key. The
 * first write records the answer, so nothing is written before its first token. A failed write is
 * tried again; memory stays bounded (MAX_UNSTORED, see `room`). The end stores the last event with
 * everything before it, marks the answer ended, and only then sends it.
 */
export class AnswerLog {
  private next: number;
  /** Sent, not yet cut into a chunk. */
  private buffered: NumberedEvent[] = [];
  /** Cut, waiting to be written, in order. */
  private readonly chunks: PendingWrite[] = [];
  private unstored = 0;
  /** The answer is recorded (a write succeeded). */
  private recorded = false;
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
      answer: AnswerRef;
      cipher: SessionCipher | undefined;
      sse: SseStream;
      logger: Logger;
    },
  ) {
    this.next = options.answer.firstSeq;
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
   * The live client went: what is buffered is stored now, and the answer recorded even before its
   * first event, so that a client can resume it at once, on any replica.
   */
  detach(): void {
    this.flush();
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
    this.stopWriting();
    const final = last && { seq: this.next++, event: last.event, json: JSON.stringify(last.data) };
    if (final) this.buffered.push(final);
    this.cut();
    await this.writing;
    if (this.chunks.length === 0) this.chunks.push({ chunk: endMarker(this.next), size: 0 });
    try {
      for (const [i, { chunk }] of this.chunks.entries())
        await this.write(chunk, i === this.chunks.length - 1);
    } catch (err) {
      this.options.logger.error(
        { err, answerId: this.options.answer.id },
        'chat: storing the end of an answer’s events failed; a resumed stream will not see its end',
      );
    }
    this.chunks.length = 0;
    this.unstored = 0;
    this.wake();
    if (final) this.options.sse.sendJson([asSseEvent(final)]);
    this.options.sse.close();
  }

  /**
   * The answer's end stored in a transaction of the caller's (its append, so one transaction stores
   * both): `commit` runs it, calling `storeEvents` within it, which stores every event not yet
   * stored and `last`, and marks the answer ended. Once `commit` resolves, `last` is sent and the live
   * stream closes. When it throws (rethrown here), nothing of `last` was stored or sent: `end` follows.
   */
  async endWith(
    last: readonly { event: string; data: unknown }[],
    commit: (storeEvents: (trx: Knex.Transaction) => Promise<void>) => Promise<void>,
  ): Promise<void> {
    this.stopWriting();
    // The write under way first: on SQLite the transaction holds the only connection.
    await this.writing;
    const finals = last.map(({ event, data }, i) => ({
      seq: this.next + i,
      event,
      json: JSON.stringify(data),
    }));
    const events = [...this.buffered, ...finals];
    const pending = [
      ...this.chunks.flatMap(({ chunk }) => (chunk ? [chunk] : [])),
      eventChunk(this.options.answer.id, events, this.options.cipher),
    ];
    await commit(async (trx) => {
      for (const [i, chunk] of pending.entries())
        await this.options.store.write(
          this.options.answer,
          chunk,
          { first: !this.recorded && i === 0, end: i === pending.length - 1 },
          trx,
        );
    });
    this.next += finals.length;
    this.recorded = true;
    this.buffered = [];
    this.chunks.length = 0;
    this.unstored = 0;
    this.wake();
    this.options.sse.sendJson(finals.map(asSseEvent));
    this.options.sse.close();
  }

  /** `end` and `endWith` write what is left themselves: the writes in the background stop. */
  private stopWriting(): void {
    this.ending = true;
    clearTimeout(this.flushTimer);
    clearTimeout(this.retryTimer);
  }

  /** Cuts what is buffered into a chunk and writes what waits, unless a write is under way. */
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
      chunk: eventChunk(this.options.answer.id, events, this.options.cipher),
      size: events.length,
    });
  }

  /** The next write: the first chunk waiting, or the answer alone while it is not recorded. */
  private head(): PendingWrite | undefined {
    return this.chunks[0] ?? (this.recorded ? undefined : { size: 0 });
  }

  private store(): void {
    if (this.writing || this.retryTimer || this.ending) return;
    this.writing = this.writeAll().finally(() => {
      this.writing = undefined;
      if (this.head()) this.store();
    });
  }

  private async write(chunk: EventChunk | undefined, end: boolean): Promise<void> {
    await this.options.store.write(this.options.answer, chunk, { first: !this.recorded, end });
    this.recorded = true;
  }

  /** Writes what waits, in order (until `end` takes over); on a failure, stops and tries again RETRY_MS later. */
  private async writeAll(): Promise<void> {
    for (let head = this.head(); head && !this.ending; head = this.head()) {
      try {
        await this.write(head.chunk, false);
      } catch (err) {
        if (!this.failing)
          this.options.logger.warn(
            { err, answerId: this.options.answer.id },
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
      if (head.chunk) this.chunks.shift();
      this.unstored -= head.size;
      if (this.unstored < MAX_UNSTORED) this.wake();
    }
  }

  private wake(): void {
    for (const resume of this.waiting) resume();
    this.waiting.clear();
  }
}
