import { setTimeout as sleep } from 'node:timers/promises';
import { performance } from 'node:perf_hooks';
import { SigilError } from '@sigil/plugin-api';
import type { SseStream } from '../../../core/http/sse.ts';
import { type AnswerEvents, type AnswerStream, asSseEvent } from './answer-events.ts';
import type { SessionCipher } from './history-keys.ts';

/** How often a resumed stream looks for new events of an answer still running (on any replica). */
const POLL_MS = 100;
/** Chunks (stored writes, of up to 64 events each) read by one query. */
const READ_CHUNKS = 50;

/** The replica answering a message stopped (it died, or its claim ran out) before the answer ended. */
export const answerLost = (): SigilError =>
  new SigilError('unavailable', 'The replica answering this message stopped before its answer ended', {
    hint: 'Send the message again with the same id: a 409 already_charged when it had used something (then send it with a new id), else a new answer',
    details: { reason: 'answer_lost' },
  });

/**
 * A resumed stream: the answer's stored events numbered after `after`, then, while it runs (here or
 * on another replica), the new ones as they are stored, read every POLL_MS, until its last event; each
 * once and in order. It keeps the answer going while it follows (`followed_until`, every third of
 * `graceMs`), since the answer's own client may be gone. Answers `ended` once the last event was sent;
 * `lost` when the answer's replica died, or it lost its claim and stored no end within `claimMs` (the
 * caller ends the stream with an error); `stopped` when its client went or `closing` aborted (the
 * runtime stops: the client resumes again from the last id it read).
 */
export async function followAnswer(options: {
  store: AnswerEvents;
  answer: AnswerStream;
  cipher: SessionCipher | undefined;
  after: number;
  sse: SseStream;
  graceMs: number;
  claimMs: number;
  closing: AbortSignal;
}): Promise<'ended' | 'lost' | 'stopped'> {
  const { store, answer, cipher, sse, graceMs, claimMs } = options;
  const stop = AbortSignal.any([sse.signal, options.closing]);
  let last = options.after;
  /** When this stream first saw the answer without its claim and not ended (performance.now()). */
  let releasedSince: number | undefined;
  let followedAt = -Infinity;
  for (;;) {
    // The state first: an answer seen ended has every event stored by the reads that follow.
    const state = answer.ended ? 'ended' : await store.state(answer);
    for (let more = true; more && !stop.aborted;) {
      const read = await store.read(answer, cipher, last, READ_CHUNKS);
      sse.sendJson(read.events.map(asSseEvent));
      last = read.events.at(-1)?.seq ?? last;
      more = read.more;
    }
    if (stop.aborted) return 'stopped';
    if (state === 'ended') return 'ended';
    const now = performance.now();
    if (state === 'released') releasedSince ??= now;
    else releasedSince = undefined;
    if (state === 'lost' || (releasedSince !== undefined && now - releasedSince >= claimMs)) return 'lost';
    if (graceMs > 0 && now - followedAt >= graceMs / 3) {
      await store.follow(answer.id, graceMs);
      followedAt = now;
    }
    await sleep(POLL_MS, undefined, { signal: stop }).catch(() => undefined);
  }
}
