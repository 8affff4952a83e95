import type { Knex } from 'knex';
import { checksumAddress } from '../../../core/chain/address.ts';
import { SigilError } from '@sigil/plugin-api';
import { asText, toAmount } from './amounts.ts';
import type { EntryKind } from './balance.ts';

export interface LedgerEntry {
  id: string;
  wallet: string;
  kind: EntryKind;
  amount: bigint;
  agentId: string | undefined;
  /** The caller's key for a charge; the ledger's own for other kinds (e.g. `withdrawal:<id>`). */
  idempotencyKey: string;
  /** The withdrawal or sweep an entry belongs to, or a deposit's `<transaction>:<log index>`. */
  reference: string | undefined;
  createdAt: Date;
}

/** A row of ledger_entries. */
export interface EntryRow {
  id: string | number;
  wallet: string;
  kind: EntryKind;
  amount: string;
  agent_id: string | null;
  idempotency_key: string;
  reference: string | null;
  created_at: string | number;
}

/** Charges carry the caller's key under this prefix, so they can never meet the ledger's own keys. */
export const CHARGE_KEY_PREFIX = 'charge:';

/** A charge's identity across wallets: the wallet and the caller's key (keys are unique per wallet). */
export const walletKey = (entry: { wallet: string; idempotencyKey: string }): string =>
  `${entry.wallet} ${entry.idempotencyKey}`;

export const IDEMPOTENCY_KEY = /^[A-Za-z0-9._:-]{1,200}$/;

/** The wallet's entry under `key` (a charge's: CHARGE_KEY_PREFIX and the caller's key). */
export async function entryByKey(db: Knex, wallet: string, key: string): Promise<LedgerEntry | undefined> {
  const row = (await db('ledger_entries')
    .where({ wallet, idempotency_key: key })
    .first(...entryColumns(db))) as EntryRow | undefined;
  return row ? entryOf(row) : undefined;
}

/**
 * A page of the wallet's entries, newest first. `cursor` is the previous page's `nextCursor`;
 * entries appended meanwhile never shift a page (ids only grow).
 */
export async function historyPage(
  db: Knex,
  wallet: string,
  options: { limit: number; cursor?: string; kinds?: readonly EntryKind[] },
): Promise<{ entries: LedgerEntry[]; nextCursor: string | undefined }> {
  let query = db('ledger_entries')
    .where({ wallet: checksumAddress(wallet) })
    .orderBy('id', 'desc')
    .limit(options.limit + 1)
    .select(...entryColumns(db));
  if (options.cursor !== undefined) query = query.andWhere('id', '<', decodeCursor(options.cursor));
  if (options.kinds && options.kinds.length > 0) query = query.whereIn('kind', options.kinds);
  const rows = (await query) as EntryRow[];
  const page = rows.slice(0, options.limit).map(entryOf);
  const last = page[page.length - 1];
  return {
    entries: page,
    nextCursor: rows.length > options.limit && last ? encodeCursor(last.id) : undefined,
  };
}

/** The columns `entryOf` reads, the amount as text so it never passes through a float. */
export const entryColumns = (db: Knex) =>
  [
    'id',
    'wallet',
    'kind',
    asText(db, 'amount'),
    'agent_id',
    'idempotency_key',
    'reference',
    'created_at',
  ] as const;

export function entryOf(row: EntryRow): LedgerEntry {
  return {
    id: String(row.id),
    wallet: row.wallet,
    kind: row.kind,
    amount: toAmount(row.amount),
    agentId: row.agent_id ?? undefined,
    idempotencyKey: row.idempotency_key.startsWith(CHARGE_KEY_PREFIX)
      ? row.idempotency_key.slice(CHARGE_KEY_PREFIX.length)
      : row.idempotency_key,
    reference: row.reference ?? undefined,
    createdAt: new Date(Number(row.created_at)),
  };
}

const encodeCursor = (id: string): string => Buffer.from(`e:${id}`).toString('base64url');

function decodeCursor(cursor: string): string {
  const decoded = Buffer.from(cursor, 'base64url').toString('utf8');
  const match = /^e:([0-9]{1,19})$/.exec(decoded);
  if (!match) throw new SigilError('invalid_request', 'Invalid query.cursor: not a cursor this API returned');
  return match[1] as string;
}
