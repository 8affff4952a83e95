import { randomUUID } from 'node:crypto';
import type { Clock } from '../../../core/clock.ts';
import { type LlmMessage, SigilError } from '@sigil/plugin-api';

/** The limits of README "Chat" (config `runtime.chat`). */
export interface SessionLimits {
  maxSessionsPerAgent: number;
  maxMessagesPerSession: number;
  sessionIdleSeconds: number;
}

/** One conversation with an agent. Held in the runtime's memory: a restart ends every session. */
export interface ChatSession {
  id: string;
  agentId: string;
  wallet: string;
  model: string;
  /** The llm-provider plugin serving `model`. */
  provider: string;
  /** Gateway servers the tool loop enables and offers (their tools as `<server>__<tool>`). */
  servers: string[];
  system: string | undefined;
  /** The conversation so far: only requests that completed (`done`) are kept. */
  messages: LlmMessage[];
  /** User messages accepted so far. */
  userMessages: number;
  /** Message ids already answered (a retry with the same id is a conflict, its charge a replay). */
  answered: Set<string>;
  createdAt: Date;
  lastUsedAt: Date;
  /** A chat request is streaming now: one at a time per session. */
  busy: boolean;
}

export const sessionView = (session: ChatSession) => ({
  id: session.id,
  agentId: session.agentId,
  model: session.model,
  provider: session.provider,
  servers: session.servers,
  messages: session.userMessages,
  busy: session.busy,
  createdAt: session.createdAt.toISOString(),
  lastUsedAt: session.lastUsedAt.toISOString(),
});

export const sessionNotFound = (agentId: string, id: string): SigilError =>
  new SigilError('not_found', `No session ${id} of agent ${agentId} for this wallet`, {
    hint: `Open one with POST /agents/${agentId}/sessions; sessions end after an idle time and at a runtime restart`,
    details: { reason: 'session_not_found' },
  });

/** Open chat sessions by id; idle ones expire (checked on every access). */
export class ChatSessions {
  private readonly sessions = new Map<string, ChatSession>();

  constructor(
    private readonly limits: SessionLimits,
    private readonly clock: Clock,
    /** Told of each session that ends (closed or expired), to let go of what it held. */
    private readonly onEnd: (sessionId: string) => void = () => undefined,
  ) {}

  open(
    input: Omit<
      ChatSession,
      'id' | 'messages' | 'userMessages' | 'answered' | 'createdAt' | 'lastUsedAt' | 'busy'
    >,
  ): ChatSession {
    this.expire();
    const open = this.forAgent(input.wallet, input.agentId);
    if (open.length >= this.limits.maxSessionsPerAgent) {
      throw new SigilError(
        'rate_limited',
        `Agent ${input.agentId} has ${open.length} open sessions, the most it may have`,
        {
          hint: `Close one with DELETE /agents/${input.agentId}/sessions/:sessionId, or wait: a session idle for ${this.limits.sessionIdleSeconds} s ends`,
          details: { reason: 'too_many_sessions', limit: this.limits.maxSessionsPerAgent },
        },
      );
    }
    const now = this.clock.now();
    const session: ChatSession = {
      ...input,
      id: randomUUID(),
      messages: input.system === undefined ? [] : [{ role: 'system', content: input.system }],
      userMessages: 0,
      answered: new Set(),
      createdAt: now,
      lastUsedAt: now,
      busy: false,
    };
    this.sessions.set(session.id, session);
    return session;
  }

  /** The session if `wallet` owns it and it belongs to `agentId`; 404 otherwise. */
  get(wallet: string, agentId: string, id: string): ChatSession {
    this.expire();
    const session = this.sessions.get(id);
    if (!session || session.wallet !== wallet || session.agentId !== agentId)
      throw sessionNotFound(agentId, id);
    return session;
  }

  forAgent(wallet: string, agentId: string): ChatSession[] {
    this.expire();
    return [...this.sessions.values()].filter((s) => s.wallet === wallet && s.agentId === agentId);
  }

  close(wallet: string, agentId: string, id: string): void {
    this.get(wallet, agentId, id);
    this.sessions.delete(id);
    this.onEnd(id);
  }

  /** Marks the session busy for one request; refuses a second one at once and a full session. */
  begin(session: ChatSession, messageId: string): void {
    if (session.busy) {
      throw new SigilError('conflict', 'This session is answering another message', {
        hint: 'Wait for its done (or error) event, or open another session',
        details: { reason: 'session_busy' },
      });
    }
    if (session.answered.has(messageId)) {
      throw new SigilError('conflict', `Message ${messageId} was already answered in this session`, {
        hint: 'Send a new message with another id (or none: the runtime gives one)',
        details: { reason: 'message_already_answered', messageId },
      });
    }
    if (session.userMessages >= this.limits.maxMessagesPerSession) {
      throw new SigilError(
        'conflict',
        `This session has reached its ${this.limits.maxMessagesPerSession} messages`,
        {
          hint: 'Open a new session with POST /agents/:id/sessions',
          details: { reason: 'session_full', limit: this.limits.maxMessagesPerSession },
        },
      );
    }
    session.busy = true;
    session.lastUsedAt = this.clock.now();
  }

  /** Ends the request; `messages` (the whole new conversation) is kept only when it completed. */
  end(session: ChatSession, messageId: string, messages: LlmMessage[] | undefined): void {
    session.busy = false;
    session.lastUsedAt = this.clock.now();
    if (messages !== undefined) {
      session.messages = messages;
      session.userMessages++;
      session.answered.add(messageId);
    }
  }

  private expire(): void {
    const cutoff = this.clock.now().getTime() - this.limits.sessionIdleSeconds * 1000;
    for (const [id, session] of this.sessions)
      if (!session.busy && session.lastUsedAt.getTime() < cutoff) {
        this.sessions.delete(id);
        this.onEnd(id);
      }
  }
}
