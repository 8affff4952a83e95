import type { Knex } from 'knex';
import { SigilError } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import { databaseNowMs, dialectOf, type Database } from '../../../core/db/database.ts';
import { LeasedPass, type JobLeases } from '../../../core/db/leased-pass.ts';
import type { Replica } from '../../../core/db/replicas.ts';
import type { SseEvent } from '../../../core/http/sse.ts';
import type { Logger } from '../../../core/log.ts';
import type { SessionCipher } from './history-keys.ts';

/** The number of a message's first event, when no earlier attempt at it was stored. */
export const FIRST_SEQ = 1;

/** One attempt at answering a message: its id is the request's claim on the session. */
export interface AnswerRef {
  id: string;
  sessionId: string;
  messageId: string;
  /** Its first event's number: after every number of the message's earlier attempts. */
  firstSeq: number;
}

/** An attempt as stored. */
export interface AnswerStream extends AnswerRef {
  /** The replica that answers it. */
  replica: string;
  /** Its last event is stored. */
  ended: boolean;
}

/** An event of an answer's stream: its number (the SSE id), its name, and its data as JSON text. */
export interface NumberedEvent {
  seq: number;
  event: string;
  json: string;
}

/** Events stored in one write, sealed when the session has a data key (none: the end alone). */
export interface EventChunk {
  firstSeq: number;
  lastSeq: number;
  sealed: boolean;
  text: string;
}

/**
 * Where an answer is, seen from another request: `ended` (its last event is stored); `running` (its
 * claim on the session is live); `released` (its claim went, its replica lives: its end is being
 * stored, or it lost the claim and is stopping); `lost` (its replica died, or its claim ran out).
 */
export type AnswerState = 'ended' | 'running' | 'released' | 'lost';

export const asSseEvent = ({ seq, event, json }: NumberedEvent): SseEvent => ({
  event,
  json,
  id: String(seq),
});

/** Where a chunk is sealed: bound to its answer and place, so a row moved elsewhere does not open. */
const chunkPlace = (answerId: string, firstSeq: number): string => `answer-events:${answerId}:${firstSeq}`;

/** Makes the stored form of events (one write): `[[seq, event, data], …]`, sealed when `cipher`. */
export function eventChunk(
  answerId: string,
  events: readonly NumberedEvent[],
  cipher: SessionCipher | undefined,
): EventChunk {
  const first = events[0] as NumberedEvent;
  const text = `[${events.map((e) => `[${e.seq},${JSON.stringify(e.event)},${e.json}]`).join(',')}]`;
  return {
    firstSeq: first.seq,
    lastSeq: (events.at(-1) as NumberedEvent).seq,
    sealed: cipher !== undefined,
    text: cipher ? cipher.seal(text, chunkPlace(answerId, first.seq)) : text,
  };
}

/** The last write of an answer with no event left to store: it marks the end alone. */
export const endMarker = (nextSeq: number): EventChunk => ({
  firstSeq: nextSeq,
  lastSeq: nextSeq - 1,
  sealed: false,
  text: '[]',
});

interface ChunkRow {
  first_seq: number | string;
  last_seq: number | string;
  sealed: boolean | number;
  events: string;
}

interface AnswerRow {
  id: string;
  session_id: string;
  message_id: string;
  replica: string;
  first_seq: number | string;
  /** When its last write was stored (its `ended_at`), or null. */
  ended_at: number | string | null;
}

/** How many expired answers one statement of the retention pass deletes. */
const SWEEP_BATCH = 500;
/** How often the events of answers past their retention are deleted (by one replica each time). */
const SWEEP_INTERVAL_MS = 60_000;

/**
 * The stored events of chat answers (tables chat_answers, chat_answer_events): what a stream cut
 * mid-answer is resumed from, on any replica, and a resume buffer only (the answer itself is in the
 * history). Deleted with their session (a cascade), and `retentionMs` after their answer ended by a
 * pass one replica runs each minute (a LeasedPass, `chat:retention:<minute>`), or, for an answer
 * whose replica died, once its claim is gone.
 */
export class AnswerEvents {
  private readonly retention: LeasedPass;

  constructor(
    private readonly deps: JobLeases & {
      db: Database;
      clock: Clock;
      replica: Replica;
      logger: Logger;
      /** How long an ended answer's events are kept (runtime.chat.streamRetentionSeconds). */
      retentionMs: number;
    },
  ) {
    this.retention = new LeasedPass({
      leases: deps.leases,
      holder: deps.holder,
      leaseMs: deps.leaseMs,
      name: 'chat:retention',
      job: () => this.sweep(),
      intervalMs: SWEEP_INTERVAL_MS,
      clock: deps.clock,
      logger: deps.logger,
      failure: 'chat: deleting expired answer events failed; retrying at the next pass',
    });
  }

  /**
   * The first event number of a new attempt at answering `messageId`: after every number of the
   * message's earlier attempts (so a Last-Event-ID names one attempt). Read once the request holds its
   * session's claim, so no earlier attempt of the message still numbers events.
   */
  async nextSeq(sessionId: string, messageId: string): Promise<number> {
    const row = (await this.deps
      .db('chat_answers as a')
      .leftJoin('chat_answer_events as e', 'e.answer_id', 'a.id')
      .where({ 'a.session_id': sessionId, 'a.message_id': messageId })
      .first(this.deps.db.raw('max(coalesce(??, ??)) as ??', ['e.last_seq', 'a.first_seq', 'last']))) as
      { last: number | string | null } | undefined;
    return row?.last == null ? FIRST_SEQ : Number(row.last) + 1;
  }

  /**
   * Stores a chunk of the answer's events (again after a write that committed but failed to say so:
   * nothing changes). The `first` write records the answer (answered by this replica), in the same
   * transaction; the `end` is the last chunk (`endMarker` when no event is left), which marks the
   * answer ended, so a reader that sees it ended has every event stored. The answer is not recorded
   * before its first write, so nothing is written before its first token.
   */
  async write(
    answer: AnswerRef,
    chunk: EventChunk | undefined,
    options: { first: boolean; end: boolean },
    /** A transaction of the caller's to write in (the answer's append, `AnswerLog.endWith`). */
    within?: Knex.Transaction,
  ): Promise<void> {
    const answerRow = (db: Knex) =>
      db('chat_answers')
        .insert({
          id: answer.id,
          session_id: answer.sessionId,
          message_id: answer.messageId,
          replica: this.deps.replica.id,
          first_seq: answer.firstSeq,
          created_at: this.now(),
        })
        .onConflict('id')
        .ignore();
    const chunkRow = (into: Knex.QueryBuilder, stored: EventChunk) =>
      into
        .insert({
          answer_id: answer.id,
          first_seq: stored.firstSeq,
          last_seq: stored.lastSeq,
          sealed: stored.sealed,
          events: stored.text,
          ended_at: options.end ? this.now() : null,
        })
        .onConflict(['answer_id', 'first_seq'])
        .ignore();
    const db = within ?? this.deps.db;
    if (options.first && chunk) {
      // PostgreSQL: the answer and its first chunk in one statement (a data-modifying CTE; the chunk's
      // foreign key is checked at the statement's end), so no transaction of four statements.
      if (dialectOf(db) === 'postgres')
        await chunkRow(db.with('answer', answerRow(db)).into('chat_answer_events'), chunk);
      else {
        const both = async (trx: Knex) => {
          await answerRow(trx);
          await chunkRow(trx('chat_answer_events'), chunk);
        };
        await (within ? both(within) : db.transaction(both));
      }
    } else if (options.first) await answerRow(db);
    else if (chunk) await chunkRow(db('chat_answer_events'), chunk);
  }

  /**
   * The attempt at `messageId` that the event number `after` belongs to (the one whose numbers start
   * at or before it), or with `after` 0 the latest; undefined when none is stored.
   */
  async find(sessionId: string, messageId: string, after: number): Promise<AnswerStream | undefined> {
    let query = this.deps
      .db('chat_answers as a')
      .where({ 'a.session_id': sessionId, 'a.message_id': messageId })
      .orderBy('a.first_seq', 'desc')
      .select('a.*', this.endedAt());
    if (after > 0) query = query.andWhere('a.first_seq', '<=', after);
    const row = (await query.first()) as AnswerRow | undefined;
    return (
      row && {
        id: row.id,
        sessionId: row.session_id,
        messageId: row.message_id,
        firstSeq: Number(row.first_seq),
        replica: row.replica,
        ended: row.ended_at !== null,
      }
    );
  }

  /** The answer's stored events numbered after `after`, in order, from at most `chunks` writes. */
  async read(
    answer: AnswerStream,
    cipher: SessionCipher | undefined,
    after: number,
    chunks: number,
  ): Promise<{ events: NumberedEvent[]; more: boolean }> {
    const rows = (await this.deps
      .db('chat_answer_events')
      .where({ answer_id: answer.id })
      .andWhere('last_seq', '>', after)
      .orderBy('first_seq')
      .limit(chunks + 1)) as ChunkRow[];
    const events = rows
      .slice(0, chunks)
      .flatMap((row) => openChunk(answer.id, row, cipher))
      .filter((event) => event.seq > after);
    return { events, more: rows.length > chunks };
  }

  /** Where the answer is (AnswerState), by the database's clock and the replicas' heartbeats. */
  async state(answer: AnswerStream): Promise<AnswerState> {
    const { db } = this.deps;
    const row = (await db('chat_answers as a')
      .leftJoin('chat_sessions as s', 's.id', 'a.session_id')
      .where('a.id', answer.id)
      .first(
        this.endedAt(),
        's.answering_claim',
        's.answering_by',
        db.raw('case when ?? > ? then 1 else 0 end as ??', [
          's.answering_until',
          databaseNowMs(db),
          'claim_live',
        ]),
      )) as
      | {
          ended_at: number | string | null;
          answering_claim: string | null;
          answering_by: string | null;
          claim_live: number | string;
        }
      | undefined;
    if (!row) return 'lost';
    if (row.ended_at !== null) return 'ended';
    if (row.answering_claim === answer.id)
      return Number(row.claim_live) === 1 && (await this.alive(row.answering_by)) ? 'running' : 'lost';
    return (await this.alive(answer.replica)) ? 'released' : 'lost';
  }

  /** A resumed stream follows the answer: it goes on for `forMs` more, by the database's clock. */
  async follow(answerId: string, forMs: number): Promise<void> {
    const { db } = this.deps;
    await db('chat_answers')
      .where({ id: answerId })
      .update({ followed_until: db.raw('? + ?', [databaseNowMs(db), forMs]) });
  }

  /** How long a resumed stream still follows the answer (ms; 0 or less: none does). */
  async followedFor(answerId: string): Promise<number> {
    const { db } = this.deps;
    const row = (await db('chat_answers')
      .where({ id: answerId })
      .first(db.raw('?? - ? as ??', ['followed_until', databaseNowMs(db), 'remaining']))) as
      { remaining: number | string | null } | undefined;
    return Number(row?.remaining ?? 0);
  }

  /**
   * Deletes the answers (their events with them) that ended `retentionMs` ago, and those that never
   * ended (their replica died) begun as long ago whose claim is gone; answers how many.
   */
  async sweep(): Promise<number> {
    const { db } = this.deps;
    const cutoff = this.now() - this.deps.retentionMs;
    const ended = db('chat_answer_events').select('answer_id as id').where('ended_at', '<', cutoff);
    const orphaned = db('chat_answers as a')
      .select('a.id')
      .where('a.created_at', '<', cutoff)
      .whereNotExists(
        db('chat_answer_events as e')
          .select('e.answer_id')
          .whereRaw('?? = ??', ['e.answer_id', 'a.id'])
          .whereNotNull('e.ended_at'),
      )
      .whereNotExists(
        db('chat_sessions as s')
          .select('s.id')
          .whereRaw('?? = ??', ['s.answering_claim', 'a.id'])
          .andWhere('s.answering_until', '>', databaseNowMs(db)),
      );
    let deleted = 0;
    for (const expired of [ended, orphaned])
      for (;;) {
        const ids = ((await expired.clone().limit(SWEEP_BATCH)) as { id: string }[]).map((row) => row.id);
        if (ids.length > 0) deleted += await db('chat_answers').whereIn('id', ids).delete();
        if (ids.length < SWEEP_BATCH) break;
      }
    return deleted;
  }

  /** Deletes what expired if this minute's pass is due and no replica has taken it: true when it ran here. */
  retentionDue(): Promise<boolean> {
    return this.retention.runDue();
  }

  /** Starts the retention pass. */
  start(): void {
    this.retention.start();
  }

  async stop(): Promise<void> {
    await this.retention.stop();
  }

  /** A column of `chat_answers as a`: when its last write was stored, or null while it runs. */
  private endedAt(): Knex.Raw {
    return this.deps.db.raw('(select max(??) from ?? as ?? where ?? = ??) as ??', [
      'e.ended_at',
      'chat_answer_events',
      'e',
      'e.answer_id',
      'a.id',
      'ended_at',
    ]);
  }

  private async alive(replica: string | null): Promise<boolean> {
    if (replica === null) return false;
    return (await this.deps.replica.claimersAlive().where({ id: replica }).first()) !== undefined;
  }

  private now(): number {
    return this.deps.clock.now().getTime();
  }
}

function openChunk(answerId: string, row: ChunkRow, cipher: SessionCipher | undefined): NumberedEvent[] {
  const place = chunkPlace(answerId, Number(row.first_seq));
  if (row.sealed && !cipher)
    throw new SigilError(
      'internal',
      `Stored events of answer ${answerId} are sealed, its session has no key`,
      {
        details: { reason: 'history_tampered', place },
      },
    );
  const text = row.sealed ? (cipher as SessionCipher).open(row.events, place) : row.events;
  return (JSON.parse(text) as [number, string, unknown][]).map(([seq, event, data]) => ({
    seq,
    event,
    json: JSON.stringify(data),
  }));
}
