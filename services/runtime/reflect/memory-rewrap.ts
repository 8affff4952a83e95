import { SigilError } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';
import type { HistoryKeys } from '../chat/history-keys.ts';
import { normalized, places } from './memory.ts';
import { MemorySealer, memoryKeyOwner } from './memory-sealer.ts';

/** What a rewrap did to the self-improvement memory. */
export interface MemoryRewrapReport {
  /** Wallet memory keys wrapped under an older key, now under the current one. */
  rewrapped: number;
  /** Values stored in plain text (from before a key was configured), now sealed (rows). */
  encrypted: number;
  /** Wallet memory keys already under the current key. */
  unchanged: number;
}

const PAGE = 200;

/**
 * The memory's part of `sigil db rewrap-history`: each wallet's memory data key still under an older
 * key is wrapped again under the current one (compare-and-set; its values are not touched), and each
 * row stored in plain text is sealed under its wallet's key (its statement's digest with it), a
 * compare-and-set on the row as it was read, so an edit meanwhile is never overwritten. Safe beside
 * serving replicas; a second run changes nothing.
 */
export async function rewrapMemory(
  db: Database,
  keys: HistoryKeys,
  clock: Clock,
): Promise<MemoryRewrapReport> {
  if (keys.current === undefined)
    throw new SigilError(
      'config_invalid',
      'No history key is configured: there is nothing to seal the memory under',
      {
        hint: 'Put the new key first in runtime.history.dataKeys (RUNTIME_DATA_KEY=<id>:<base64>,<old id>:<base64>)',
      },
    );
  const report: MemoryRewrapReport = { rewrapped: 0, encrypted: 0, unchanged: 0 };
  await eachPage(
    db,
    'reflect_keys',
    'wallet',
    (query) => query,
    async (row: KeyRow) => {
      if (row.key_id === keys.current) return void report.unchanged++;
      const owner = memoryKeyOwner(row.wallet);
      const wrapped = keys.wrap(owner, keys.unwrap(owner, { keyId: row.key_id, wrapped: row.wrapped_key }));
      const changed = await db('reflect_keys')
        .where({ wallet: row.wallet, key_id: row.key_id, wrapped_key: row.wrapped_key })
        .update({ key_id: wrapped.keyId, wrapped_key: wrapped.wrapped });
      if (changed > 0) report.rewrapped++;
    },
  );
  const sealer = new MemorySealer(db, keys, clock);
  const plain = (query: ReturnType<Database>) => query.where({ sealed: false });
  /** Writes the sealed `fields` over the row as it was read (`was`), if it is still so. */
  const sealed = async (table: string, was: Record<string, string>, fields: Record<string, string>) => {
    const changed = await db(table)
      .where({ ...was, sealed: false })
      .update({ ...fields, sealed: true });
    if (changed > 0) report.encrypted++;
  };
  await eachPage(db, 'reflect_facets', 'id', plain, async (row: PlainRow & { statement: string }) => {
    const statement = await sealer.seal(row.wallet, row.statement, places.facet(row.id));
    await sealed('reflect_facets', { id: row.id, statement: row.statement }, { statement });
  });
  await eachPage(db, 'reflect_learnings', 'id', plain, async (row: PlainRow & { statement: string }) => {
    const statement = await sealer.seal(row.wallet, row.statement, places.learning(row.id));
    const digest = await sealer.digest(row.wallet, normalized(row.statement));
    await sealed(
      'reflect_learnings',
      { id: row.id, statement: row.statement },
      { statement, normalized_hash: digest },
    );
  });
  await eachPage(
    db,
    'reflect_skills',
    'id',
    plain,
    async (row: PlainRow & { description: string; instructions: string }) => {
      const [description, instructions] = await Promise.all([
        sealer.seal(row.wallet, row.description, places.skill(row.id, 'description')),
        sealer.seal(row.wallet, row.instructions, places.skill(row.id, 'instructions')),
      ]);
      await sealed(
        'reflect_skills',
        { id: row.id, description: row.description, instructions: row.instructions },
        { description, instructions },
      );
    },
  );
  return report;
}

interface KeyRow {
  wallet: string;
  key_id: string;
  wrapped_key: string;
}

interface PlainRow {
  id: string;
  wallet: string;
}

/** Each row of `table` that `where` keeps, by pages in the order of `column`. */
async function eachPage<Row>(
  db: Database,
  table: string,
  column: string,
  where: (query: ReturnType<Database>) => ReturnType<Database>,
  each: (row: Row) => Promise<void>,
): Promise<void> {
  let after = '';
  for (;;) {
    const rows = (await where(db(table).where(column, '>', after))
      .orderBy(column)
      .limit(PAGE)) as Row[];
    if (rows.length === 0) return;
    for (const row of rows) await each(row);
    after = (rows.at(-1) as Record<string, string>)[column] as string;
  }
}
