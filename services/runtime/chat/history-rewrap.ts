import { randomBytes } from 'node:crypto';
import { SigilError } from '@sigil/plugin-api';
import type { Database } from '../../../core/db/database.ts';
import { takeChange } from './history-rows.ts';
import {
  type HistoryKeys,
  messagePlace,
  SessionCipher,
  sessionKeyOwner,
  SYSTEM_PLACE,
} from './history-keys.ts';

/** What a rewrap did, in sessions. */
export interface RewrapReport {
  /** Data keys wrapped under an older key, now under the current one. */
  rewrapped: number;
  /** Plain-text sessions (from before a key was configured), now encrypted under a new data key. */
  encrypted: number;
  /** Already under the current key. */
  unchanged: number;
}

const PAGE = 200;

/**
 * Key rotation (`sigil db rewrap-history`): brings every session under the current key of
 * `runtime.history.dataKeys`. A data key wrapped under an older key is unwrapped and wrapped again (its
 * messages are not touched), compare-and-set on the row, so a run beside serving replicas is safe and a
 * second run changes nothing. A plain-text session gets a data key and its content sealed, in one
 * transaction under the wallet's change lock (as appends take it). Run it once every replica has the
 * new key first in its list; the old key can leave the list after.
 */
export async function rewrapHistory(db: Database, keys: HistoryKeys): Promise<RewrapReport> {
  const current = keys.current;
  if (current === undefined)
    throw new SigilError('config_invalid', 'No history key is configured: there is nothing to wrap under', {
      hint: 'Put the new key first in runtime.history.dataKeys (RUNTIME_DATA_KEY=<id>:<base64>,<old id>:<base64>)',
    });
  const report: RewrapReport = { rewrapped: 0, encrypted: 0, unchanged: 0 };
  let after = '';
  for (;;) {
    const rows = (await db('chat_sessions')
      .where('id', '>', after)
      .orderBy('id')
      .limit(PAGE)
      .select('id', 'wallet', 'key_id', 'wrapped_key')) as {
      id: string;
      wallet: string;
      key_id: string | null;
      wrapped_key: string | null;
    }[];
    if (rows.length === 0) return report;
    for (const row of rows) {
      if (row.key_id === current) report.unchanged++;
      else if (row.key_id !== null && row.wrapped_key !== null) {
        const stored = { keyId: row.key_id, wrapped: row.wrapped_key };
        const owner = sessionKeyOwner(row.id);
        const wrapped = keys.wrap(owner, keys.unwrap(owner, stored));
        const changed = await db('chat_sessions')
          .where({ id: row.id, key_id: row.key_id, wrapped_key: row.wrapped_key })
          .update({ key_id: wrapped.keyId, wrapped_key: wrapped.wrapped });
        if (changed > 0) report.rewrapped++;
      } else if (await encryptSession(db, keys, row.id, row.wallet)) report.encrypted++;
    }
    after = (rows.at(-1) as { id: string }).id;
  }
}

/** Seals a plain-text session's content under a new data key; false when it was sealed meanwhile. */
async function encryptSession(db: Database, keys: HistoryKeys, id: string, wallet: string): Promise<boolean> {
  return db.transaction(async (trx) => {
    // The wallet's change lock: no append of this session runs until the commit.
    await takeChange(trx, wallet);
    const session = (await trx('chat_sessions').where({ id }).whereNull('key_id').first('system')) as
      { system: string | null } | undefined;
    if (!session) return false;
    const dataKey = randomBytes(32);
    const cipher = new SessionCipher(id, dataKey);
    const messages = (await trx('chat_messages')
      .where({ session_id: id })
      .select('seq', 'role', 'content')) as {
      seq: number | string;
      role: string;
      content: string;
    }[];
    for (const message of messages)
      await trx('chat_messages')
        .where({ session_id: id, seq: message.seq })
        .update({ content: cipher.seal(message.content, messagePlace(Number(message.seq), message.role)) });
    const wrapped = keys.wrap(sessionKeyOwner(id), dataKey);
    await trx('chat_sessions')
      .where({ id })
      .update({
        system: session.system === null ? null : cipher.seal(session.system, SYSTEM_PLACE),
        key_id: wrapped.keyId,
        wrapped_key: wrapped.wrapped,
      });
    return true;
  });
}
