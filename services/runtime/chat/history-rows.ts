import type { Knex } from 'knex';
import { type LlmMessage, SigilError } from '@sigil/plugin-api';
import type { EndReason, StoredMessage, StoredSession } from './history.ts';
import { messagePlace, type SessionCipher, SYSTEM_PLACE } from './history-keys.ts';

/** A chat_sessions row (migrations 0260, 0320): how the ConversationStore (history.ts) keeps a session. */
export interface SessionRow {
  id: string;
  wallet: string;
  agent_id: string;
  model: string;
  provider: string;
  servers: string;
  system: string | null;
  user_messages: number | string;
  last_seq: number | string;
  key_id: string | null;
  wrapped_key: string | null;
  change_seq: number | string;
  created_at: number | string;
  last_used_at: number | string;
  ended_at: number | string | null;
  end_reason: EndReason | null;
  /** The request answering it (migration 0320): its replica, its claim and until when (database time). */
  answering_by: string | null;
  answering_claim: string | null;
  answering_until: number | string | null;
}

export interface MessageRow {
  session_id: string;
  seq: number | string;
  message_id: string;
  role: LlmMessage['role'];
  content: string;
  cost: number | string | null;
  created_at: number | string;
}

/**
 * The wallet's next change number, its counter row locked until `trx` ends: every write to a wallet's
 * sessions takes one first, so they run one at a time across replicas, in the order of their numbers.
 */
export async function takeChange(trx: Knex.Transaction, wallet: string): Promise<number> {
  const [row] = (await trx('chat_history_wallets')
    .insert({ wallet, last_change: 1 })
    .onConflict('wallet')
    .merge({ last_change: trx.raw('?? + 1', ['chat_history_wallets.last_change']) })
    .returning('last_change')) as { last_change: number | string }[];
  return Number(row?.last_change);
}

export function sealMessage(message: LlmMessage, seq: number, cipher: SessionCipher | undefined): string {
  const text = JSON.stringify(message);
  return cipher ? cipher.seal(text, messagePlace(seq, message.role)) : text;
}

export function messageOf(row: MessageRow, cipher: SessionCipher | undefined): StoredMessage {
  const seq = Number(row.seq);
  const text = cipher ? cipher.open(row.content, messagePlace(seq, row.role)) : row.content;
  return {
    sessionId: row.session_id,
    seq,
    messageId: row.message_id,
    message: JSON.parse(text) as LlmMessage,
    cost: row.cost === null ? undefined : BigInt(row.cost),
    createdAt: new Date(Number(row.created_at)),
  };
}

export const openSystem = (session: StoredSession, cipher: SessionCipher | undefined): string | undefined =>
  session.storedSystem === undefined
    ? undefined
    : (cipher?.open(session.storedSystem, SYSTEM_PLACE) ?? session.storedSystem);

export function sessionOf(row: SessionRow): StoredSession {
  return {
    id: row.id,
    wallet: row.wallet,
    agentId: row.agent_id,
    model: row.model,
    provider: row.provider,
    servers: JSON.parse(row.servers) as string[],
    userMessages: Number(row.user_messages),
    lastSeq: Number(row.last_seq),
    createdAt: new Date(Number(row.created_at)),
    lastUsedAt: new Date(Number(row.last_used_at)),
    endedAt: row.ended_at === null ? undefined : new Date(Number(row.ended_at)),
    endReason: row.end_reason ?? undefined,
    dataKey:
      row.key_id === null || row.wrapped_key === null
        ? undefined
        : { keyId: row.key_id, wrapped: row.wrapped_key },
    storedSystem: row.system ?? undefined,
  };
}

/** The rows past a page's place in the order (`column`, id): `<` going down, `>` going up. */
export const beyond = (
  query: Knex.QueryBuilder,
  column: string,
  direction: '<' | '>',
  place: { number: number; id: string },
): Knex.QueryBuilder =>
  query.andWhere((q) =>
    q
      .where(column, direction, place.number)
      .orWhere((same) => same.where(column, place.number).andWhere('id', direction, place.id)),
  );

/**
 * A page's place: `<kind>:<number>:<id>`, base64url (sessions by creation `s`, by change `w`, messages
 * by seq `m`); only what this API returned decodes.
 */
export const encodeCursor = (kind: 's' | 'w' | 'm', number: number, id: string): string =>
  Buffer.from(`${kind}:${number}:${id}`).toString('base64url');

export function decodeCursor(cursor: string, kind: 's' | 'w' | 'm'): { number: number; id: string } {
  const match = new RegExp(`^${kind}:([0-9]{1,16}):([0-9a-f-]{36})$`).exec(
    Buffer.from(cursor, 'base64url').toString('utf8'),
  );
  if (!match)
    throw new SigilError('invalid_request', 'Invalid cursor: not one this API returned', {
      details: { reason: 'invalid_cursor' },
    });
  return { number: Number(match[1]), id: match[2] as string };
}
