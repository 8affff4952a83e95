import type { Knex } from 'knex';
import type { Address, Hex } from 'viem';
import { checksumAddress } from '../../../core/chain/address.ts';
import { SigilError } from '@sigil/plugin-api';
import { asText, toAmount } from './amounts.ts';
import { signedTransaction, type SignedTransaction } from './signed-transaction.ts';

/** Money leaving a deposit address: to its owner (withdrawal) or to the treasury (sweep of settled spend). */
export type TransferKind = 'withdrawal' | 'sweep';

/**
 * `pending` (recorded, funds held, maybe not sent yet) → `submitted` (a transaction is out) →
 * `completed` (mined in a confirmed block); or, when the transfer can no longer happen, `cancelling`
 * (a cancelAuthorization is out, so the signed transfer can never be used later) → `failed`. A
 * withdrawal's funds count in pendingWithdrawals from `pending` until `completed` or `failed`.
 */
export type TransferState = 'pending' | 'submitted' | 'cancelling' | 'completed' | 'failed';
export const OPEN_STATES: readonly TransferState[] = ['pending', 'submitted', 'cancelling'];

export interface Transfer {
  id: string;
  wallet: string;
  kind: TransferKind;
  amount: bigint;
  from: Address;
  to: Address;
  state: TransferState;
  idempotencyKey: string | undefined;
  /** EIP-3009 nonce the deposit key signs the transfer with: one transfer, at most once, on chain. */
  nonce: Hex;
  /** Unix seconds: the signed transfer is void from then on. */
  validBefore: bigint;
  fromBlock: bigint;
  txHash: Hex | undefined;
  cancelTxHash: Hex | undefined;
  blockNumber: bigint | undefined;
  reason: string | undefined;
  attempts: number;
  sentAt: number | undefined;
  /** The operator's transaction recorded before it was sent (the cancellation's while cancelling). */
  signed: SignedTransaction | undefined;
  createdAt: Date;
  updatedAt: Date;
}

/** A row of ledger_transfers, as `selectTransfers` reads it (its bigints as text). */
export interface TransferRow {
  id: string;
  wallet: string;
  kind: TransferKind;
  amount: string;
  from_address: string;
  to_address: string;
  state: TransferState;
  idempotency_key: string | null;
  nonce: string;
  valid_before: string;
  from_block: string;
  tx_hash: string | null;
  cancel_tx_hash: string | null;
  block_number: string | null;
  reason: string | null;
  attempts: number | string;
  sent_at: string | number | null;
  signed_tx: string | null;
  signed_nonce: string | number | null;
  created_at: string | number;
  updated_at: string | number;
}

/** The transfer with `id` (only if it is `wallet`'s, when given). */
export async function readTransfer(db: Knex, id: string, wallet?: string): Promise<Transfer | undefined> {
  const row = (await selectTransfers(db)
    .where({ id, ...(wallet === undefined ? {} : { wallet: checksumAddress(wallet) }) })
    .first()) as TransferRow | undefined;
  return row ? transferOf(row) : undefined;
}

/** The wallet's transfer of `kind` recorded under an idempotency key. */
export async function transferByKey(
  db: Knex,
  wallet: string,
  kind: TransferKind,
  key: string,
): Promise<Transfer | undefined> {
  const row = (await selectTransfers(db).where({ wallet, kind, idempotency_key: key }).first()) as
    TransferRow | undefined;
  return row ? transferOf(row) : undefined;
}

/** A wallet's transfers of one kind, newest first, by pages (`cursor`: the last id of the previous page). */
export async function listTransfers(
  db: Knex,
  wallet: string,
  kind: TransferKind,
  options: { limit: number; cursor?: string },
): Promise<{ transfers: Transfer[]; nextCursor: string | undefined }> {
  let query = selectTransfers(db)
    .where({ wallet: checksumAddress(wallet), kind })
    .orderBy([
      { column: 'created_at', order: 'desc' },
      { column: 'id', order: 'desc' },
    ])
    .limit(options.limit + 1);
  if (options.cursor !== undefined) {
    const after = decodeTransferCursor(options.cursor);
    query = query.andWhere((q) =>
      q
        .where('created_at', '<', after.createdAt)
        .orWhere((w) => w.where('created_at', after.createdAt).andWhere('id', '<', after.id)),
    );
  }
  const rows = (await query) as TransferRow[];
  const transfers = rows.slice(0, options.limit).map(transferOf);
  const last = transfers[transfers.length - 1];
  return {
    transfers,
    nextCursor:
      rows.length > options.limit && last
        ? encodeTransferCursor(last.createdAt.getTime(), last.id)
        : undefined,
  };
}

/** Open transfers, of a wallet when given (what the balance counts as in flight). */
export async function openTransfers(db: Knex, wallet?: string): Promise<Transfer[]> {
  const rows = (await selectTransfers(db)
    .whereIn('state', OPEN_STATES)
    .modify((q) => {
      if (wallet) q.where({ wallet: checksumAddress(wallet) });
    })) as TransferRow[];
  return rows.map(transferOf);
}

function selectTransfers(db: Knex) {
  return db('ledger_transfers').select(
    'id',
    'wallet',
    'kind',
    asText(db, 'amount'),
    'from_address',
    'to_address',
    'state',
    'idempotency_key',
    'nonce',
    asText(db, 'valid_before'),
    asText(db, 'from_block'),
    'tx_hash',
    'cancel_tx_hash',
    asText(db, 'block_number'),
    'reason',
    'attempts',
    'sent_at',
    'signed_tx',
    'signed_nonce',
    'created_at',
    'updated_at',
  );
}

export function transferOf(row: TransferRow): Transfer {
  return {
    id: row.id,
    wallet: row.wallet,
    kind: row.kind,
    amount: toAmount(row.amount),
    from: checksumAddress(row.from_address),
    to: checksumAddress(row.to_address),
    state: row.state,
    idempotencyKey: row.idempotency_key ?? undefined,
    nonce: row.nonce as Hex,
    validBefore: toAmount(row.valid_before),
    fromBlock: toAmount(row.from_block),
    txHash: (row.tx_hash ?? undefined) as Hex | undefined,
    cancelTxHash: (row.cancel_tx_hash ?? undefined) as Hex | undefined,
    blockNumber: row.block_number === null ? undefined : toAmount(row.block_number),
    reason: row.reason ?? undefined,
    attempts: Number(row.attempts),
    sentAt: row.sent_at === null ? undefined : Number(row.sent_at),
    signed:
      row.signed_tx === null || row.signed_nonce === null
        ? undefined
        : signedTransaction(row.signed_tx as Hex, Number(row.signed_nonce)),
    createdAt: new Date(Number(row.created_at)),
    updatedAt: new Date(Number(row.updated_at)),
  };
}

const encodeTransferCursor = (createdAt: number, id: string): string =>
  Buffer.from(`t:${createdAt}:${id}`).toString('base64url');

function decodeTransferCursor(cursor: string): { createdAt: number; id: string } {
  const match = /^t:([0-9]{1,16}):([0-9a-f-]{36})$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
  if (!match) throw new SigilError('invalid_request', 'Invalid query.cursor: not a cursor this API returned');
  return { createdAt: Number(match[1]), id: match[2] as string };
}
