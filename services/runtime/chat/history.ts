import { randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { type LlmMessage, SigilError } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import { databaseNowMs, type Database } from '../../../core/db/database.ts';
import type { Replica } from '../../../core/db/replicas.ts';
import {
  type HistoryKeys,
  SessionCipher,
  sessionKeyOwner,
  SYSTEM_PLACE,
  type WrappedDataKey,
} from './history-keys.ts';
import {
  beyond,
  decodeCursor,
  encodeCursor,
  type MessageRow,
  messageOf,
  openSystem,
  sealMessage,
  type SessionRow,
  sessionOf,
  takeChange,
} from './history-rows.ts';

/** Why a session ended: closed by its owner, or idle for `sessionIdleSeconds`. */
export type EndReason = 'closed' | 'expired';

/** A chat session as stored (its content, the system prompt and messages, is read separately). */
export interface StoredSession {
  id: string;
  wallet: string;
  agentId: string;
  model: string;
  /** The llm-provider plugin serving `model`. */
  provider: string;
  /** Gateway servers the tool loop enables and offers (their tools as `<server>__<tool>`). */
  servers: string[];
  /** User messages answered (a request that reached `done`). */
  userMessages: number;
  /** The seq of its last stored message (0: none). */
  lastSeq: number;
  createdAt: Date;
  lastUsedAt: Date;
  endedAt: Date | undefined;
  endReason: EndReason | undefined;
  /** Its data key, wrapped; undefined: its content is plain text. */
  dataKey: WrappedDataKey | undefined;
  /** The system prompt as stored: sealed under the data key when there is one. */
  storedSystem: string | undefined;
}

/** One stored message: where it is (session, seq), the request that produced it, and what it cost. */
export interface StoredMessage {
  sessionId: string;
  /** 1, 2, … in the session's order. */
  seq: number;
  /** The id of the user message whose request produced it (the client's, or one the runtime gave). */
  messageId: string;
  message: LlmMessage;
  /**
   * What the request cost (its platformCost, ledger base units), on the last message it stored (the
   * answer); undefined on the others, so summing a session's costs counts each request once.
   */
  cost: bigint | undefined;
  createdAt: Date;
}

export interface NewSession {
  wallet: string;
  agentId: string;
  model: string;
  provider: string;
  servers: string[];
  system: string | undefined;
}

/** A session a run of the self-improvement pipeline has to look at, and its place in their order. */
export interface PendingSession extends StoredSession {
  /** Pass as `after` once this session is processed: later pages start after it. */
  watermark: string;
}

export type SessionState = 'open' | 'ended' | 'all';

/** Who a session is, as told to the listeners of its end and of its deletion. */
export type SessionRef = Pick<StoredSession, 'id' | 'wallet' | 'agentId'>;

/** How a session is deleted: `forget` asks that what was learned only from it go too (`?forget=true`). */
export interface SessionDeletion {
  forget: boolean;
}

/** What the listeners removed with a session, counted by kind (the memory's: facets, learnings, skills). */
export type Removed = Record<string, number>;

/**
 * Runs inside the transaction that deletes a session, before its rows go: what was derived from the
 * session alone can go with it (a throw rolls the deletion back). It answers what it removed, if anything.
 */
export type SessionDeletedListener = (
  session: SessionRef,
  trx: Knex.Transaction,
  deletion: SessionDeletion,
) => Promise<Removed | undefined>;

/** Rows inserted by one statement: well under SQLite's bound variables, a long tool loop included. */
const INSERT_CHUNK = 100;

/**
 * Chat sessions and their messages in the database (SQLite or PostgreSQL), so a session outlives the
 * process that opened it and any replica serves it. Every write to a wallet's sessions first takes the
 * next number of the wallet's change counter (a row lock held to the commit), which both serializes
 * the writes of one wallet across replicas and orders its sessions by their last change: the
 * watermark of `pending`. Content is sealed under each session's data key when `keys` has one
 * (history-keys.ts).
 *
 * A session answers one request at a time across replicas: the request claims it in its row
 * (`answering_*`, see `claim`), and deleting it or ending it idle leaves a session whose claim is live.
 * The claim is columns of the session rather than a lease of core/db/leases.ts: the deletion and the
 * idle expiry test it in the statement that ends the session, the append clears it in the transaction
 * that stores the answer, and the `leases` table would keep a row per session ever answered.
 */
export class ConversationStore {
  private readonly endedListeners: ((session: SessionRef) => void)[] = [];
  private readonly deletedListeners: SessionDeletedListener[] = [];

  constructor(
    private readonly deps: {
      db: Database;
      clock: Clock;
      keys: HistoryKeys;
      /** A session unused this long ends (`expired`). */
      idleMs: number;
      /** This process among the replicas: who claims, and whose claims are live. */
      replica: Replica;
      /** How long a claim lasts unrenewed (database.leaseSeconds). */
      claimMs: number;
    },
  ) {}

  /** How long a request's claim on a session lasts unrenewed. */
  get claimMs(): number {
    return this.deps.claimMs;
  }

  /** Told (after the commit) of each session that ends: closed, expired or deleted while open. */
  onSessionEnded(listener: (session: SessionRef) => void): void {
    this.endedListeners.push(listener);
  }

  /** Run in the deleting transaction of each session deleted (with `forget`, its learnings go too). */
  onSessionDeleted(listener: SessionDeletedListener): void {
    this.deletedListeners.push(listener);
  }

  /**
   * Claims the session for one request, for `claimMs` by the database's clock, compare-and-set: of
   * requests racing on any replicas exactly one takes it. Answers the claim's id (the fence of the
   * request's append); refused (`session_busy`) while another request holds a live claim, and
   * `session_not_found` when the session was deleted meanwhile. With `touch`, records a use of the
   * session in the same statement (see `touch`). Answers too the session's last message number as
   * the claim found it: 0 when it has no stored message yet.
   */
  async claim(
    sessionId: string,
    { touch }: { touch: boolean },
  ): Promise<{ id: string; usedAt: Date | undefined; lastSeq: number }> {
    const claim = randomUUID();
    const { db } = this.deps;
    const now = this.now();
    const taken = (await this.free(db('chat_sessions').where({ id: sessionId })).update(
      { ...this.claimedBy(claim), ...(touch ? { last_used_at: now } : {}) },
      ['last_seq'],
    )) as { last_seq: number | string }[];
    const [row] = taken;
    if (row) return { id: claim, usedAt: touch ? new Date(now) : undefined, lastSeq: Number(row.last_seq) };
    throw await notFree(db, sessionId);
  }

  /**
   * `claim` of a session read in the same statement, for a message with a fresh id: taken, with its
   * use recorded, only when it is `wallet`'s and `agentId`'s, open, not idle past `idleMs`, below
   * `maxMessages` and free; answered as the claim left it. Undefined when any of these fails (or the
   * session is not there): the caller reads the session to say which, and claims it the usual way.
   */
  async claimOpen(
    wallet: string,
    agentId: string,
    sessionId: string,
    maxMessages: number,
  ): Promise<{ session: StoredSession; claim: { id: string; lastSeq: number } } | undefined> {
    const claim = randomUUID();
    const { db, idleMs } = this.deps;
    const now = this.now();
    const open = db('chat_sessions')
      .where({ id: sessionId, wallet, agent_id: agentId })
      .whereNull('ended_at')
      .andWhere('last_used_at', '>=', now - idleMs)
      .andWhere('user_messages', '<', maxMessages);
    const [row] = (await this.free(open).update(
      { ...this.claimedBy(claim), last_used_at: now },
      '*',
    )) as SessionRow[];
    return row && { session: sessionOf(row), claim: { id: claim, lastSeq: Number(row.last_seq) } };
  }

  /** The columns of a session claimed by `claim`, of this replica, for `claimMs` by the database's clock. */
  private claimedBy(claim: string) {
    const { db, replica, claimMs } = this.deps;
    return {
      answering_by: replica.id,
      answering_claim: claim,
      answering_until: db.raw('? + ?', [databaseNowMs(db), claimMs]),
    };
  }

  /** Extends the claim to `claimMs` from now; false when it is no longer held (ran out, or taken). */
  async renew(sessionId: string, claim: string): Promise<boolean> {
    const { db, claimMs } = this.deps;
    const now = databaseNowMs(db);
    const renewed = await db('chat_sessions')
      .where({ id: sessionId, answering_claim: claim })
      .andWhere('answering_until', '>', now)
      .update({ answering_until: db.raw('? + ?', [now, claimMs]) });
    return renewed === 1;
  }

  /** Frees the session of the claim, if it still holds it. */
  async release(sessionId: string, claim: string): Promise<void> {
    await this.deps.db('chat_sessions').where({ id: sessionId, answering_claim: claim }).update(UNCLAIMED);
  }

  /** Of `ids`, the sessions a request is answering now, on this replica or another. */
  async answering(ids: readonly string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const rows = (await this.answeringNow(this.deps.db('chat_sessions').whereIn('id', ids)).select('id')) as {
      id: string;
    }[];
    return new Set(rows.map((row) => row.id));
  }

  /**
   * Stores a new session, unless its agent has `maxOpen` open sessions already (counted under the
   * wallet's lock, so replicas together never pass it): then `{ full: count }`.
   */
  async create(input: NewSession, maxOpen: number): Promise<StoredSession | { full: number }> {
    await this.expireIdle({ wallet: input.wallet, agent_id: input.agentId });
    const id = randomUUID();
    const envelope = this.deps.keys.newDataKey(sessionKeyOwner(id));
    const now = this.now();
    return this.deps.db.transaction(async (trx) => {
      const change = await takeChange(trx, input.wallet);
      const open = await trx('chat_sessions')
        .where({ wallet: input.wallet, agent_id: input.agentId })
        .whereNull('ended_at')
        .count({ n: '*' })
        .first();
      const count = Number(open?.n ?? 0);
      if (count >= maxOpen) return { full: count };
      const cipher = envelope && new SessionCipher(id, envelope.dataKey);
      const row: SessionRow = {
        id,
        wallet: input.wallet,
        agent_id: input.agentId,
        model: input.model,
        provider: input.provider,
        servers: JSON.stringify(input.servers),
        system:
          input.system === undefined ? null : cipher ? cipher.seal(input.system, SYSTEM_PLACE) : input.system,
        user_messages: 0,
        last_seq: 0,
        key_id: envelope?.wrapped.keyId ?? null,
        wrapped_key: envelope?.wrapped.wrapped ?? null,
        change_seq: change,
        created_at: now,
        last_used_at: now,
        ended_at: null,
        end_reason: null,
        ...UNCLAIMED,
      };
      await trx('chat_sessions').insert(row);
      return sessionOf(row);
    });
  }

  /** The wallet's session `id` (open or ended), or undefined; one idle too long ends first. */
  async find(wallet: string, id: string): Promise<StoredSession | undefined> {
    const read = async () =>
      (await this.deps.db('chat_sessions').where({ id, wallet }).first()) as SessionRow | undefined;
    const row = await read();
    if (!row || row.ended_at !== null || Number(row.last_used_at) >= this.now() - this.deps.idleMs)
      return row && sessionOf(row);
    await this.expireIdle({ wallet, id });
    return await read().then((again) => again && sessionOf(again));
  }

  /** An agent's sessions, newest first, by pages (`cursor`: the previous page's `nextCursor`). */
  async list(
    wallet: string,
    agentId: string,
    options: { limit: number; cursor?: string | undefined; state: SessionState },
  ): Promise<{ sessions: StoredSession[]; nextCursor: string | undefined }> {
    await this.expireIdle({ wallet, agent_id: agentId });
    let query = this.deps
      .db('chat_sessions')
      .where({ wallet, agent_id: agentId })
      .orderBy([
        { column: 'created_at', order: 'desc' },
        { column: 'id', order: 'desc' },
      ])
      .limit(options.limit + 1);
    if (options.state === 'open') query = query.whereNull('ended_at');
    if (options.state === 'ended') query = query.whereNotNull('ended_at');
    if (options.cursor !== undefined)
      query = beyond(query, 'created_at', '<', decodeCursor(options.cursor, 's'));
    const rows = (await query) as SessionRow[];
    const sessions = rows.slice(0, options.limit).map(sessionOf);
    const last = sessions.at(-1);
    return {
      sessions,
      nextCursor:
        rows.length > options.limit && last
          ? encodeCursor('s', last.createdAt.getTime(), last.id)
          : undefined,
    };
  }

  /** The session's system prompt, opened. */
  system(session: StoredSession): string | undefined {
    return openSystem(session, this.cipherOf(session));
  }

  /**
   * What the model is given of the session: its system prompt, then every stored message in order
   * (none read when `lastSeq`, the session's last message number under the request's claim, is 0).
   */
  async conversation(session: StoredSession, lastSeq: number): Promise<LlmMessage[]> {
    const cipher = this.cipherOf(session);
    const rows =
      lastSeq === 0
        ? []
        : ((await this.deps
            .db('chat_messages')
            .where({ session_id: session.id })
            .orderBy('seq')) as MessageRow[]);
    const system = openSystem(session, cipher);
    return [
      ...(system === undefined ? [] : [{ role: 'system' as const, content: system }]),
      ...rows.map((message) => messageOf(message, cipher).message),
    ];
  }

  /** The wallet's session's messages after `afterSeq` (0: from the first), in order, at most `limit`. */
  async messages(
    wallet: string,
    sessionId: string,
    options: { afterSeq: number; limit: number },
  ): Promise<{ messages: StoredMessage[]; more: boolean }> {
    const row = (await this.deps.db('chat_sessions').where({ id: sessionId, wallet }).first()) as
      SessionRow | undefined;
    if (!row) throw sessionGone(sessionId);
    const cipher = this.cipherOf(sessionOf(row));
    const rows = (await this.deps
      .db('chat_messages')
      .where({ session_id: sessionId })
      .andWhere('seq', '>', options.afterSeq)
      .orderBy('seq')
      .limit(options.limit + 1)) as MessageRow[];
    return {
      messages: rows.slice(0, options.limit).map((message) => messageOf(message, cipher)),
      more: rows.length > options.limit,
    };
  }

  /** Where the session stored the answer to `messageId` (its seqs), if it did (a retry is refused). */
  async answerOf(
    sessionId: string,
    messageId: string,
    db: Knex = this.deps.db,
  ): Promise<StoredAnswer | undefined> {
    const row = (await db('chat_messages')
      .where({ session_id: sessionId, message_id: messageId })
      .min({ first: 'seq' })
      .max({ last: 'seq' })
      .first()) as { first: number | string | null; last: number | string | null } | undefined;
    return row?.first == null ? undefined : { firstSeq: Number(row.first), lastSeq: Number(row.last) };
  }

  /** Records a use of the session now (its idle time starts again). */
  async touch(session: StoredSession): Promise<Date> {
    const now = this.now();
    await this.deps.db('chat_sessions').where({ id: session.id }).update({ last_used_at: now });
    return new Date(now);
  }

  /**
   * Stores what one answered request added (its user message, then the model's turns and tool
   * results), with its cost on the last of them, and frees the session of its claim, in one
   * transaction. Refused, with nothing stored, when the request no longer holds `claim` (it ran out
   * and another request took the session) or the session was deleted or stored this message id
   * (not looked for when the id is `fresh`). `alsoWrite` runs last in the same transaction (the
   * answer's stored events, `AnswerLog.endWith`).
   */
  async append(
    session: StoredSession,
    messageId: string,
    claim: string,
    added: readonly LlmMessage[],
    cost: bigint,
    { fresh, alsoWrite }: { fresh: boolean; alsoWrite?: (trx: Knex.Transaction) => Promise<void> },
  ): Promise<void> {
    const now = this.now();
    await this.deps.db.transaction(async (trx) => {
      const change = await takeChange(trx, session.wallet);
      // The session is freed and numbered on only while the request holds its claim: the statement
      // that checks the claim is the one that writes (its row as written answers the numbers taken).
      const [row] = (await trx('chat_sessions')
        .where({ id: session.id, answering_claim: claim })
        .update(
          {
            user_messages: trx.raw('?? + 1', ['user_messages']),
            last_seq: trx.raw('?? + ?', ['last_seq', added.length]),
            last_used_at: now,
            change_seq: change,
            ...UNCLAIMED,
          },
          '*',
        )) as SessionRow[];
      if (!row) {
        const exists = await trx('chat_sessions').where({ id: session.id }).first('id');
        throw exists ? claimLost() : sessionGone(session.id);
      }
      // A fresh id (the runtime's, made for this request) cannot be stored already: not looked for.
      const answer = fresh ? undefined : await this.answerOf(session.id, messageId, trx);
      if (answer) throw alreadyAnswered(session, messageId, answer);
      const cipher = this.cipherOf(sessionOf(row));
      const first = Number(row.last_seq) - added.length + 1;
      const rows: MessageRow[] = added.map((message, index) => ({
        session_id: session.id,
        seq: first + index,
        message_id: messageId,
        role: message.role,
        content: sealMessage(message, first + index, cipher),
        cost: index === added.length - 1 ? cost.toString() : null,
        created_at: now,
      }));
      for (let start = 0; start < rows.length; start += INSERT_CHUNK)
        await trx('chat_messages').insert(rows.slice(start, start + INSERT_CHUNK));
      await alsoWrite?.(trx);
    });
  }

  /** Ends an open session (its history stays readable); false when it had ended already. */
  async end(session: SessionRef, reason: EndReason): Promise<boolean> {
    const now = this.now();
    const ended = await this.deps.db.transaction(async (trx): Promise<number> => {
      const change = await takeChange(trx, session.wallet);
      return trx('chat_sessions')
        .where({ id: session.id })
        .whereNull('ended_at')
        .update({ ended_at: now, end_reason: reason, change_seq: change });
    });
    if (ended > 0) this.tellEnded([session]);
    return ended > 0;
  }

  /**
   * Deletes the session and its messages (the listeners first, in the same transaction); answers what
   * the listeners removed with it, their counts added up by kind. Refused (`session_busy`) while a
   * request is answering it, on any replica: its row is locked first, so no claim comes between.
   */
  async delete(session: StoredSession, deletion: SessionDeletion = { forget: false }): Promise<Removed> {
    const removed: Removed = {};
    await this.deps.db.transaction(async (trx) => {
      await takeChange(trx, session.wallet);
      if ((await this.free(trx('chat_sessions').where({ id: session.id })).update(UNCLAIMED)) === 0)
        throw await notFree(trx, session.id);
      for (const listener of this.deletedListeners)
        for (const [kind, count] of Object.entries((await listener(refOf(session), trx, deletion)) ?? {}))
          removed[kind] = (removed[kind] ?? 0) + count;
      await trx('chat_messages').where({ session_id: session.id }).delete();
      await trx('chat_sessions').where({ id: session.id }).delete();
    });
    if (session.endedAt === undefined) this.tellEnded([session]);
    return removed;
  }

  /**
   * For the self-improvement pipeline: the wallet's sessions with messages that changed after the
   * watermark `after` (none: from the start), in the order of their last change, at most `limit`.
   * By default only ended ones (closed, or idle past `sessionIdleSeconds`: they end here first);
   * `includeOpen` adds open ones. A session changed again after it was processed (a new message, its
   * end) comes again after a later watermark. Its messages: `messages(wallet, id, { afterSeq })`.
   */
  async pending(
    wallet: string,
    options: { after?: string | undefined; limit: number; includeOpen?: boolean },
  ): Promise<{ sessions: PendingSession[]; more: boolean }> {
    await this.expireIdle({ wallet });
    let query = this.deps
      .db('chat_sessions')
      .where({ wallet })
      .andWhere('user_messages', '>', 0)
      .orderBy(['change_seq', 'id'])
      .limit(options.limit + 1);
    if (!options.includeOpen) query = query.whereNotNull('ended_at');
    if (options.after !== undefined)
      query = beyond(query, 'change_seq', '>', decodeCursor(options.after, 'w'));
    const rows = (await query) as SessionRow[];
    return {
      sessions: rows.slice(0, options.limit).map((row) => ({
        ...sessionOf(row),
        watermark: encodeCursor('w', Number(row.change_seq), row.id),
      })),
      more: rows.length > options.limit,
    };
  }

  /**
   * Ends the open sessions matching `where` idle past `idleMs` (not those a request is answering, on
   * any replica), at the moment they became idle. Read first, so an access with nothing idle writes
   * nothing.
   */
  private async expireIdle(where: { wallet: string; agent_id?: string; id?: string }): Promise<void> {
    const cutoff = this.now() - this.deps.idleMs;
    const idle = () =>
      this.free(
        this.deps
          .db('chat_sessions')
          .where(where)
          .whereNull('ended_at')
          .andWhere('last_used_at', '<', cutoff),
      );
    const candidates = ((await idle().select('id')) as { id: string }[]).map((row) => row.id);
    if (candidates.length === 0) return;
    const expired = await this.deps.db.transaction(async (trx) => {
      const change = await takeChange(trx, where.wallet);
      return (await idle()
        .transacting(trx)
        .whereIn('id', candidates)
        .update({
          ended_at: trx.raw('?? + ?', ['last_used_at', this.deps.idleMs]),
          end_reason: 'expired',
          change_seq: change,
        })
        .returning(['id', 'wallet', 'agent_id'])) as { id: string; wallet: string; agent_id: string }[];
    });
    this.tellEnded(expired.map((row) => ({ id: row.id, wallet: row.wallet, agentId: row.agent_id })));
  }

  /**
   * The sessions of `query` a request is answering now: claimed by a live replica (this one alone when
   * replicas do not share the database: another claimer was this process's predecessor) until a time
   * the database's clock has not reached.
   */
  private answeringNow(query: Knex.QueryBuilder): Knex.QueryBuilder {
    const { db, replica } = this.deps;
    return query
      .whereIn('answering_by', replica.claimersAlive())
      .andWhere('answering_until', '>', databaseNowMs(db));
  }

  /** The sessions of `query` no request is answering (the negation of `answeringNow`). */
  private free(query: Knex.QueryBuilder): Knex.QueryBuilder {
    const { db, replica } = this.deps;
    return query.andWhere((free) =>
      free
        .whereNull('answering_by')
        .orWhereNotIn('answering_by', replica.claimersAlive())
        .orWhere('answering_until', '<=', databaseNowMs(db)),
    );
  }

  /** The cipher of the session's content, or undefined when it is plain text. */
  cipherOf(session: StoredSession): SessionCipher | undefined {
    if (session.dataKey === undefined) return undefined;
    return new SessionCipher(session.id, this.deps.keys.unwrap(sessionKeyOwner(session.id), session.dataKey));
  }

  private tellEnded(sessions: readonly SessionRef[]): void {
    for (const session of sessions) for (const listener of this.endedListeners) listener(session);
  }

  private now(): number {
    return this.deps.clock.now().getTime();
  }
}

const refOf = (session: StoredSession): SessionRef => ({
  id: session.id,
  wallet: session.wallet,
  agentId: session.agentId,
});

/** Why a session could not be taken free: a request is answering it, or it is gone. */
const notFree = async (db: Knex, sessionId: string): Promise<SigilError> =>
  (await db('chat_sessions').where({ id: sessionId }).first('id')) ? sessionBusy() : sessionGone(sessionId);

/** The columns of a session no request claims. */
const UNCLAIMED = { answering_by: null, answering_claim: null, answering_until: null };

/** Where a request's stored messages are in its session: seqs `firstSeq` to `lastSeq`. */
export interface StoredAnswer {
  firstSeq: number;
  lastSeq: number;
}

/**
 * A message id the session has stored the answer to: the retry of a client that lost its stream. It
 * names where the stored answer is (a cursor of the messages route starting at it), never its content.
 */
export const alreadyAnswered = (session: SessionRef, messageId: string, answer: StoredAnswer): SigilError => {
  const cursor = encodeCursor('m', answer.firstSeq - 1, session.id);
  return new SigilError('conflict', `Message ${messageId} was already answered in this session`, {
    hint: `Its answer is stored: GET /agents/${session.agentId}/sessions/${session.id}/messages?cursor=${cursor} starts with it. A new message needs another id (or none: the runtime gives one)`,
    details: { reason: 'message_already_answered', messageId, ...answer, cursor },
  });
};

export const sessionBusy = (): SigilError =>
  new SigilError('conflict', 'This session is answering another message', {
    hint: 'Wait for its done (or error) event, or open another session',
    details: { reason: 'session_busy' },
  });

/** A request's claim on its session ran out (its replica stalled) and it was taken or deleted. */
export const claimLost = (): SigilError =>
  new SigilError(
    'unavailable',
    'This answer lost its session to another request: it stopped and is not stored',
    {
      hint: 'What it used is charged under its message id; send the message again with a new id',
      details: { reason: 'session_claim_lost' },
    },
  );

const sessionGone = (id: string): SigilError =>
  new SigilError('not_found', `Session ${id} was deleted`, { details: { reason: 'session_not_found' } });
