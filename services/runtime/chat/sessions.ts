import type { Knex } from 'knex';
import { type LlmMessage, SigilError } from '@sigil/plugin-api';
import { Renewal } from '../../../core/db/renewal.ts';
import {
  alreadyAnswered,
  claimLost,
  type ConversationStore,
  type Removed,
  type SessionDeletion,
  type SessionState,
  type StoredMessage,
  type StoredSession,
} from './history.ts';
import { decodeCursor, encodeCursor } from './history-rows.ts';

/** The limits of README "Chat" (config `runtime.chat`). */
export interface SessionLimits {
  maxSessionsPerAgent: number;
  maxMessagesPerSession: number;
  sessionIdleSeconds: number;
}

/** One conversation with an agent, as stored: any replica serves it, and a restart keeps it. */
export type ChatSession = StoredSession;

export const sessionView = (session: ChatSession, busy: boolean) => ({
  id: session.id,
  agentId: session.agentId,
  model: session.model,
  provider: session.provider,
  servers: session.servers,
  messages: session.userMessages,
  state: session.endedAt === undefined ? 'open' : 'ended',
  busy,
  encrypted: session.dataKey !== undefined,
  createdAt: session.createdAt.toISOString(),
  lastUsedAt: session.lastUsedAt.toISOString(),
  endedAt: session.endedAt?.toISOString() ?? null,
  endReason: session.endReason ?? null,
});

/** A stored message as the history routes show it. */
export const messageView = (stored: StoredMessage) => ({
  seq: stored.seq,
  messageId: stored.messageId,
  ...stored.message,
  cost: stored.cost?.toString() ?? null,
  createdAt: stored.createdAt.toISOString(),
});

export const sessionNotFound = (agentId: string, id: string): SigilError =>
  new SigilError('not_found', `No session ${id} of agent ${agentId} for this wallet`, {
    hint: `Open one with POST /agents/${agentId}/sessions`,
    details: { reason: 'session_not_found' },
  });

/**
 * One request's claim on its session, from `begin` to `finish` (ConversationStore.claim), renewed
 * every third of its lifetime while the answer runs. When a renewal finds it lost (this process
 * stalled past it, and another request or a deletion took the session), `signal` aborts with
 * `session_claim_lost` and the answer stops. A renewal that fails (the database unreachable) is tried
 * again at the next third: the append, fenced by the claim, stores nothing once it is lost.
 */
export class SessionClaim {
  private readonly renewal: Renewal;

  constructor(
    store: ConversationStore,
    sessionId: string,
    readonly id: string,
  ) {
    this.renewal = new Renewal(store.claimMs, () => store.renew(sessionId, id), { lost: claimLost });
  }

  /** Aborted, with `session_claim_lost`, once a renewal found the claim taken. */
  get signal(): AbortSignal {
    return this.renewal.signal;
  }

  /** Ends the renewals (the request is finishing). */
  stop(): void {
    this.renewal.stop();
  }
}

/**
 * The chat's sessions, stored by the ConversationStore: the limits, one request at a time (across
 * replicas), and what a request reads and stores. An idle session ends (`expired`); an ended one is
 * read, never chatted in.
 */
export class ChatSessions {
  constructor(
    private readonly limits: SessionLimits,
    readonly store: ConversationStore,
  ) {}

  async open(input: {
    agentId: string;
    wallet: string;
    model: string;
    provider: string;
    servers: string[];
    system: string | undefined;
  }): Promise<ChatSession> {
    const created = await this.store.create(input, this.limits.maxSessionsPerAgent);
    if ('full' in created) {
      throw new SigilError(
        'rate_limited',
        `Agent ${input.agentId} has ${created.full} open sessions, the most it may have`,
        {
          hint: `End one with POST /agents/${input.agentId}/sessions/:sessionId/end (or DELETE it), or wait: a session idle for ${this.limits.sessionIdleSeconds} s ends`,
          details: { reason: 'too_many_sessions', limit: this.limits.maxSessionsPerAgent },
        },
      );
    }
    return created;
  }

  /** The session (open or ended) if `wallet` owns it and it belongs to `agentId`; 404 otherwise. */
  async get(wallet: string, agentId: string, id: string): Promise<ChatSession> {
    const session = await this.store.find(wallet, id);
    if (!session || session.agentId !== agentId) throw sessionNotFound(agentId, id);
    return session;
  }

  list(
    wallet: string,
    agentId: string,
    page: { limit: number; cursor?: string | undefined; state: SessionState },
  ): Promise<{ sessions: ChatSession[]; nextCursor: string | undefined }> {
    return this.store.list(wallet, agentId, page);
  }

  /** The session's stored messages in order, by pages (`cursor`: the previous page's `nextCursor`). */
  async messages(
    wallet: string,
    agentId: string,
    id: string,
    page: { limit: number; cursor?: string | undefined },
  ): Promise<{ messages: StoredMessage[]; nextCursor: string | undefined }> {
    const session = await this.get(wallet, agentId, id);
    const after = page.cursor === undefined ? undefined : decodeCursor(page.cursor, 'm');
    if (after && after.id !== session.id)
      throw new SigilError('invalid_request', 'Invalid cursor: it is of another session', {
        details: { reason: 'invalid_cursor' },
      });
    const { messages, more } = await this.store.messages(wallet, session.id, {
      afterSeq: after?.number ?? 0,
      limit: page.limit,
    });
    const last = messages.at(-1);
    return { messages, nextCursor: more && last ? encodeCursor('m', last.seq, session.id) : undefined };
  }

  /** Of `sessions`, the ids of those a request is answering now, here or on another replica. */
  busy(sessions: readonly ChatSession[]): Promise<Set<string>> {
    return this.store.answering(sessions.map((session) => session.id));
  }

  async isBusy(session: ChatSession): Promise<boolean> {
    return (await this.busy([session])).has(session.id);
  }

  /** Ends the session; its history stays readable. An ended session's end is a 409. */
  async end(wallet: string, agentId: string, id: string): Promise<ChatSession> {
    const session = await this.get(wallet, agentId, id);
    if (!(await this.store.end(session, 'closed'))) throw sessionEnded(session);
    return (await this.store.find(wallet, id)) ?? session;
  }

  /**
   * Deletes the session and its history; refused while it answers a message (on any replica). With
   * `forget`, what was learned only from it goes too, and the answer counts it.
   */
  async delete(
    wallet: string,
    agentId: string,
    id: string,
    deletion: SessionDeletion = { forget: false },
  ): Promise<Removed> {
    const session = await this.get(wallet, agentId, id);
    return this.store.delete(session, deletion);
  }

  /**
   * Claims the session for one request and gives its conversation so far; refuses an ended session,
   * a second request at once (on any replica), a message id already answered (from the stored
   * history, so across restarts and replicas: the refusal says where its answer is; not looked for
   * when the id is `fresh`, made by the runtime for this request) and a full session. The claim is
   * the request's until `finish`.
   */
  async begin(
    session: ChatSession,
    messageId: string,
    { fresh }: { fresh: boolean },
  ): Promise<{ history: LlmMessage[]; claim: SessionClaim }> {
    if (session.endedAt !== undefined) throw sessionEnded(session);
    // A fresh id is never answered: with the full session refused first, nothing refuses the message
    // once it is claimed, so the claim records the use too. An id of the client's is looked for first
    // (its retry in a full session is told where its answer is), and the use recorded after.
    if (fresh) this.refuseFull(session);
    const taken = await this.store.claim(session.id, { touch: fresh });
    const claim = new SessionClaim(this.store, session.id, taken.id);
    try {
      if (!fresh) {
        const answer = await this.store.answerOf(session.id, messageId);
        if (answer) throw alreadyAnswered(session, messageId, answer);
        this.refuseFull(session);
      }
      session.lastUsedAt = taken.usedAt ?? (await this.store.touch(session));
      return { history: await this.store.conversation(session, taken.lastSeq), claim };
    } catch (err) {
      await this.release(session, claim);
      throw err;
    }
  }

  /**
   * The session of a message, claimed for it (as `get` then `begin`, refusing alike): for a fresh id,
   * a session that can take the message is read and claimed in one statement (ConversationStore.claimOpen),
   * the usual way only when it cannot, to say why.
   */
  async take(
    wallet: string,
    agentId: string,
    sessionId: string,
    messageId: string,
    { fresh }: { fresh: boolean },
  ): Promise<{ session: ChatSession; history: LlmMessage[]; claim: SessionClaim }> {
    const taken = fresh
      ? await this.store.claimOpen(wallet, agentId, sessionId, this.limits.maxMessagesPerSession)
      : undefined;
    if (!taken) {
      const session = await this.get(wallet, agentId, sessionId);
      return { session, ...(await this.begin(session, messageId, { fresh })) };
    }
    const { session } = taken;
    const claim = new SessionClaim(this.store, session.id, taken.claim.id);
    try {
      return { session, history: await this.store.conversation(session, taken.claim.lastSeq), claim };
    } catch (err) {
      await this.release(session, claim);
      throw err;
    }
  }

  /** A session at maxMessagesPerSession (as read by the request) takes no more messages. */
  private refuseFull(session: ChatSession): void {
    if (session.userMessages < this.limits.maxMessagesPerSession) return;
    throw new SigilError(
      'conflict',
      `This session has reached its ${this.limits.maxMessagesPerSession} messages`,
      {
        hint: 'Open a new session with POST /agents/:id/sessions',
        details: { reason: 'session_full', limit: this.limits.maxMessagesPerSession },
      },
    );
  }

  /**
   * Ends the request: what it `added` to the conversation (from its user message on) is stored with
   * its `cost` only when it completed (and still held its claim); the session is free again either
   * way (a request that did not complete stores nothing: `begin` counted its use).
   */
  async finish(
    session: ChatSession,
    messageId: string,
    claim: SessionClaim,
    completed:
      | {
          added: readonly LlmMessage[];
          cost: bigint;
          fresh: boolean;
          /** Written in the append's transaction (ConversationStore.append). */
          alsoWrite?: (trx: Knex.Transaction) => Promise<void>;
        }
      | undefined,
  ): Promise<void> {
    if (!completed) return this.release(session, claim);
    claim.stop();
    try {
      // Frees the session in the same transaction.
      await this.store.append(session, messageId, claim.id, completed.added, completed.cost, completed);
    } catch (err) {
      await this.release(session, claim);
      throw err;
    }
  }

  /**
   * Frees the session of the request's claim. A release that fails (the database unreachable) is not
   * the request's failure: the claim, no longer renewed, runs out within its lifetime.
   */
  private async release(session: ChatSession, claim: SessionClaim): Promise<void> {
    claim.stop();
    await this.store.release(session.id, claim.id).catch(() => undefined);
  }
}

const sessionEnded = (session: ChatSession): SigilError =>
  new SigilError('conflict', `Session ${session.id} has ended (${session.endReason ?? 'closed'})`, {
    hint: `Its history stays readable (GET /agents/${session.agentId}/sessions/${session.id}/messages); open a new session with POST /agents/${session.agentId}/sessions`,
    details: { reason: 'session_ended', endReason: session.endReason ?? null },
  });
