import { randomBytes, randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import { getAddress, zeroAddress, type Address, type Hex } from 'viem';
import { SigilError } from '@sigil/plugin-api';
import { asText, formatUsd, toAmount } from './amounts.ts';
import { SpendRefused } from './errors.ts';
import type { Ledger } from './ledger.ts';
import { utcDay } from './windows.ts';

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
  createdAt: Date;
  updatedAt: Date;
}

interface TransferRow {
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
  created_at: string | number;
  updated_at: string | number;
}

export interface WithdrawalLimits {
  minAmount: bigint;
  maxAmount: bigint;
  dailyTotal: bigint;
  maxPerHour: number;
  authorizationTtlSeconds: number;
}

/** Addresses money must never be withdrawn to: they belong to the service, or to nobody. */
export interface ForbiddenDestinations {
  token: Address | undefined;
  treasury: Address | undefined;
  operator: Address | undefined;
  /** Whether `address` is any wallet's deposit address. */
  isDepositAddress(address: Address): Promise<boolean>;
}

const HOUR_MS = 3_600_000;

/**
 * The records of transfers out of deposit addresses, and the ledger entries they make. Everything
 * here is database work under the wallet's lock; the chain side is the TransferWorker's.
 */
export class Transfers {
  constructor(private readonly ledger: Ledger) {}

  private get db() {
    return this.ledger.db;
  }

  /**
   * Records a withdrawal after its guardrails, holding the amount in pendingWithdrawals at once; the
   * worker then signs and sends it. A replayed idempotency key answers the first withdrawal.
   */
  async requestWithdrawal(input: {
    wallet: string;
    from: Address;
    to: string;
    amount: bigint;
    idempotencyKey: string;
    limits: WithdrawalLimits;
    forbidden: ForbiddenDestinations;
    /** The chain's newest block and its timestamp, read just before. */
    head: { block: bigint; timestamp: bigint };
  }): Promise<{ transfer: Transfer; replayed: boolean }> {
    const wallet = getAddress(input.wallet);
    const { limits } = input;
    const to = await checkDestination(input.to, input.forbidden);
    if (input.amount < limits.minAmount || input.amount > limits.maxAmount) {
      const limit = input.amount < limits.minAmount ? 'minAmount' : 'maxAmount';
      throw new SigilError(
        'invalid_request',
        `A withdrawal is between ${limits.minAmount} and ${limits.maxAmount} base units (${formatUsd(limits.minAmount)} to ${formatUsd(limits.maxAmount)} USD)`,
        {
          details: { limit, minAmount: limits.minAmount.toString(), maxAmount: limits.maxAmount.toString() },
        },
      );
    }
    return this.ledger.withWallet(wallet, async (trx, balance) => {
      const first = await this.byKey(trx, wallet, 'withdrawal', input.idempotencyKey);
      if (first) {
        if (first.amount !== input.amount || first.to !== to) {
          throw new SigilError('conflict', 'This idempotency key already requested another withdrawal', {
            hint: 'Use a new idempotency key for a new withdrawal',
            details: { withdrawalId: first.id },
          });
        }
        return { transfer: first, replayed: true };
      }
      const now = this.ledger.now();
      const recent = (await trx('ledger_transfers')
        .where({ wallet, kind: 'withdrawal' })
        .andWhere('created_at', '>', now - HOUR_MS)
        .orderBy('created_at', 'asc')
        .select('created_at')) as { created_at: string | number }[];
      if (recent.length >= limits.maxPerHour) {
        const retryAt = new Date(Number((recent[0] as { created_at: string | number }).created_at) + HOUR_MS);
        throw new SigilError(
          'rate_limited',
          `At most ${limits.maxPerHour} withdrawal requests in any hour; the next is possible at ${retryAt.toISOString()}`,
          {
            headers: { 'Retry-After': String(Math.max(1, Math.ceil((retryAt.getTime() - now) / 1000))) },
            details: { limit: 'maxPerHour', maxPerHour: limits.maxPerHour, retryAt: retryAt.toISOString() },
          },
        );
      }
      const day = utcDay(this.ledger.clock.now());
      const today = (await trx('ledger_transfers')
        .where({ wallet, kind: 'withdrawal' })
        .whereNot({ state: 'failed' })
        .andWhere('created_at', '>=', day.start.getTime())
        .first(trx.raw('cast(coalesce(sum(amount), 0) as text) as total'))) as { total: string };
      const withdrawnToday = toAmount(today.total);
      if (withdrawnToday + input.amount > limits.dailyTotal) {
        const remaining = limits.dailyTotal > withdrawnToday ? limits.dailyTotal - withdrawnToday : 0n;
        throw new SigilError(
          'rate_limited',
          `Withdrawals are limited to ${limits.dailyTotal} base units (${formatUsd(limits.dailyTotal)} USD) per UTC day; ${remaining} remain today; the limit resets at ${day.resetsAt.toISOString()}`,
          {
            headers: { 'Retry-After': String(Math.max(1, Math.ceil((day.resetsAt.getTime() - now) / 1000))) },
            details: {
              limit: 'dailyTotal',
              limitAmount: limits.dailyTotal.toString(),
              remaining: remaining.toString(),
              requested: input.amount.toString(),
              resetsAt: day.resetsAt.toISOString(),
            },
          },
        );
      }
      if (input.amount > balance.available) {
        throw new SpendRefused('available', {
          requested: input.amount,
          remaining: balance.available,
        });
      }
      const transfer = await this.insert(trx, {
        wallet,
        kind: 'withdrawal',
        amount: input.amount,
        from: input.from,
        to,
        idempotencyKey: input.idempotencyKey,
        validBefore: input.head.timestamp + BigInt(limits.authorizationTtlSeconds),
        fromBlock: input.head.block,
      });
      await this.ledger.append(trx, {
        wallet,
        kind: 'withdrawal_hold',
        amount: input.amount,
        idempotencyKey: `withdrawal:${transfer.id}`,
        reference: transfer.id,
      });
      return { transfer, replayed: false };
    });
  }

  /**
   * Opens a sweep of the wallet's unsettled spend not already being swept, when it reaches
   * `minimumAmount`. Returns undefined when there is nothing (enough) to sweep.
   */
  async openSweep(input: {
    wallet: string;
    from: Address;
    treasury: Address;
    minimumAmount: bigint;
    ttlSeconds: number;
    head: { block: bigint; timestamp: bigint };
  }): Promise<Transfer | undefined> {
    const wallet = getAddress(input.wallet);
    return this.ledger.withWallet(wallet, async (trx, balance) => {
      const open = (await trx('ledger_transfers')
        .where({ wallet, kind: 'sweep' })
        .whereIn('state', OPEN_STATES)
        .first(trx.raw('cast(coalesce(sum(amount), 0) as text) as total'))) as { total: string };
      const amount = balance.unsettledSpend - toAmount(open.total);
      if (amount <= 0n || amount < input.minimumAmount) return undefined;
      return this.insert(trx, {
        wallet,
        kind: 'sweep',
        amount,
        from: input.from,
        to: input.treasury,
        idempotencyKey: undefined,
        validBefore: input.head.timestamp + BigInt(input.ttlSeconds),
        fromBlock: input.head.block,
      });
    });
  }

  /**
   * The transfer was mined in a block with enough confirmations: `completed`, its entry appended
   * (withdrawn, or settled spend), and the deposit address's balance read at `balanceBlock` (a
   * confirmed block at or after it) recorded in the same transaction, so no moment counts the money
   * both at the deposit address and as gone. False when it was already finished.
   */
  async complete(
    id: string,
    outcome: { txHash: Hex; blockNumber: bigint; balance: bigint; balanceBlock: bigint },
  ): Promise<boolean> {
    const transfer = await this.get(id);
    if (!transfer) return false;
    return this.ledger.withWallet(transfer.wallet, async (trx) => {
      const moved = await trx('ledger_transfers').where({ id }).whereIn('state', OPEN_STATES).update({
        state: 'completed',
        tx_hash: outcome.txHash,
        block_number: outcome.blockNumber.toString(),
        reason: null,
        updated_at: this.ledger.now(),
      });
      if (moved === 0) return false;
      await this.ledger.append(trx, {
        wallet: transfer.wallet,
        kind: transfer.kind === 'withdrawal' ? 'withdrawal_complete' : 'settlement',
        amount: transfer.amount,
        idempotencyKey: `${transfer.kind}:${id}:complete`,
        reference: id,
      });
      await this.ledger.recordOnChainBalance(transfer.wallet, outcome.balance, outcome.balanceBlock, trx);
      return true;
    });
  }

  /**
   * The transfer can never happen (its authorization was canceled or expired unused): `failed`, and a
   * withdrawal's held funds are released. A failed sweep changes no entry: the spend stays unsettled
   * and a later sweep takes it. False when it was already finished.
   */
  async fail(id: string, reason: string): Promise<boolean> {
    const transfer = await this.get(id);
    if (!transfer) return false;
    return this.ledger.withWallet(transfer.wallet, async (trx) => {
      const moved = await trx('ledger_transfers')
        .where({ id })
        .whereIn('state', OPEN_STATES)
        .update({ state: 'failed', reason: reason.slice(0, 500), updated_at: this.ledger.now() });
      if (moved === 0) return false;
      if (transfer.kind === 'withdrawal') {
        await this.ledger.append(trx, {
          wallet: transfer.wallet,
          kind: 'withdrawal_release',
          amount: transfer.amount,
          idempotencyKey: `withdrawal:${id}:release`,
          reference: id,
        });
      }
      return true;
    });
  }

  /** Bookkeeping of the worker's progress that moves no money (sent, cancelling and why). */
  async note(
    id: string,
    change: {
      state?: 'submitted' | 'cancelling';
      txHash?: Hex;
      cancelTxHash?: Hex;
      sentAt?: number;
      reason?: string | null;
    },
  ): Promise<void> {
    await this.db('ledger_transfers')
      .where({ id })
      .whereIn('state', OPEN_STATES)
      .update({
        ...(change.state === undefined ? {} : { state: change.state }),
        ...(change.txHash === undefined ? {} : { tx_hash: change.txHash }),
        ...(change.cancelTxHash === undefined ? {} : { cancel_tx_hash: change.cancelTxHash }),
        ...(change.sentAt === undefined ? {} : { sent_at: change.sentAt }),
        ...(change.reason === undefined ? {} : { reason: change.reason?.slice(0, 500) ?? null }),
        updated_at: this.ledger.now(),
      });
  }

  /**
   * Why the last attempt failed, shown as the transfer's reason until the next one; a cancelling
   * transfer keeps the reason it is cancelled for, which its cancellation is sent and reported with.
   */
  async noteRetry(id: string, message: string): Promise<void> {
    await this.db('ledger_transfers')
      .where({ id })
      .whereIn('state', ['pending', 'submitted'])
      .update({ reason: `retrying: ${message}`.slice(0, 500), updated_at: this.ledger.now() });
  }

  /** Takes open transfers that are due (`next_attempt_at` passed) for `claimMs`, so replicas do not race. */
  async claimDue(nowMs: number, claimMs: number, limit = 20): Promise<Transfer[]> {
    const due = (await this.db('ledger_transfers')
      .whereIn('state', OPEN_STATES)
      .andWhere('next_attempt_at', '<=', nowMs)
      .orderBy('created_at')
      .limit(limit)
      .select('id', asText(this.db, 'next_attempt_at'))) as { id: string; next_attempt_at: string }[];
    const claimed: Transfer[] = [];
    for (const row of due) {
      const took = await this.db('ledger_transfers')
        .where({ id: row.id })
        .andWhere('next_attempt_at', row.next_attempt_at)
        .whereIn('state', OPEN_STATES)
        .update({ next_attempt_at: nowMs + claimMs });
      if (took === 1) {
        const transfer = await this.get(row.id);
        if (transfer) claimed.push(transfer);
      }
    }
    return claimed;
  }

  /** When to look at the transfer again (after a failed attempt: backoff). */
  async retryAt(id: string, atMs: number, attempted: boolean): Promise<void> {
    await this.db('ledger_transfers')
      .where({ id })
      .whereIn('state', OPEN_STATES)
      .update({
        next_attempt_at: atMs,
        ...(attempted ? { attempts: this.db.raw('attempts + 1') } : {}),
      });
  }

  /** Every open transfer due now (start-up recovery: whatever a dead process left is taken up again). */
  async makeAllDue(): Promise<number> {
    return this.db('ledger_transfers').whereIn('state', OPEN_STATES).update({ next_attempt_at: 0 });
  }

  async get(id: string, wallet?: string): Promise<Transfer | undefined> {
    const row = (await this.select(this.db)
      .where({ id, ...(wallet === undefined ? {} : { wallet: getAddress(wallet) }) })
      .first()) as TransferRow | undefined;
    return row ? transferOf(row) : undefined;
  }

  /** A wallet's transfers of one kind, newest first, by pages (`cursor`: the last id of the previous page). */
  async list(
    wallet: string,
    kind: TransferKind,
    options: { limit: number; cursor?: string },
  ): Promise<{ transfers: Transfer[]; nextCursor: string | undefined }> {
    let query = this.select(this.db)
      .where({ wallet: getAddress(wallet), kind })
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

  /** Open transfers of a wallet, by kind (what the balance counts as in flight). */
  async open(wallet?: string): Promise<Transfer[]> {
    const rows = (await this.select(this.db)
      .whereIn('state', OPEN_STATES)
      .modify((q) => {
        if (wallet) q.where({ wallet: getAddress(wallet) });
      })) as TransferRow[];
    return rows.map(transferOf);
  }

  private select(db: Knex) {
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
      'created_at',
      'updated_at',
    );
  }

  private async byKey(
    trx: Knex.Transaction,
    wallet: string,
    kind: TransferKind,
    key: string,
  ): Promise<Transfer | undefined> {
    const row = (await this.select(trx).where({ wallet, kind, idempotency_key: key }).first()) as
      TransferRow | undefined;
    return row ? transferOf(row) : undefined;
  }

  private async insert(
    trx: Knex.Transaction,
    input: {
      wallet: string;
      kind: TransferKind;
      amount: bigint;
      from: Address;
      to: Address;
      idempotencyKey: string | undefined;
      validBefore: bigint;
      fromBlock: bigint;
    },
  ): Promise<Transfer> {
    const now = this.ledger.now();
    const row = {
      id: randomUUID(),
      wallet: input.wallet,
      kind: input.kind,
      amount: input.amount.toString(),
      from_address: input.from,
      to_address: input.to,
      state: 'pending' as const,
      idempotency_key: input.idempotencyKey ?? null,
      nonce: `0x${randomBytes(32).toString('hex')}`,
      valid_before: input.validBefore.toString(),
      from_block: input.fromBlock.toString(),
      attempts: 0,
      next_attempt_at: 0,
      created_at: now,
      updated_at: now,
    };
    await trx('ledger_transfers').insert(row);
    return transferOf({
      ...row,
      tx_hash: null,
      cancel_tx_hash: null,
      block_number: null,
      reason: null,
      sent_at: null,
    });
  }
}

/**
 * A withdrawal destination: an EIP-55 checksummed address (a typo then fails the checksum instead of
 * sending money nowhere), not the zero address, not the token contract, not one of the service's own
 * addresses (treasury, operator) and not a deposit address of any wallet.
 */
async function checkDestination(to: string, forbidden: ForbiddenDestinations): Promise<Address> {
  const refuse = (message: string, hint?: string): never => {
    throw new SigilError('invalid_request', `Invalid body.to: ${message}`, {
      ...(hint === undefined ? {} : { hint }),
      details: { issues: [{ path: 'body.to', message }] },
    });
  };
  if (!/^0x[0-9a-fA-F]{40}$/.test(to)) refuse('must be a 0x-prefixed 20-byte hex address');
  const checksummed = getAddress(to);
  if (checksummed !== to) {
    refuse(
      'must be written with its EIP-55 checksum (mixed case)',
      'Copy the address from your wallet, which shows it checksummed; an all-lower-case address carries no checksum',
    );
  }
  const same = (other: Address | undefined) =>
    other !== undefined && other.toLowerCase() === to.toLowerCase();
  if (checksummed === zeroAddress) refuse('is the zero address: tokens sent there are lost');
  if (same(forbidden.token)) refuse('is the token contract itself: tokens sent there are lost');
  if (same(forbidden.treasury) || same(forbidden.operator)) refuse("is one of this service's own addresses");
  if (await forbidden.isDepositAddress(checksummed)) {
    refuse('is a deposit address of this service', 'Withdraw to a wallet you control');
  }
  return checksummed;
}

function transferOf(row: TransferRow): Transfer {
  return {
    id: row.id,
    wallet: row.wallet,
    kind: row.kind,
    amount: toAmount(row.amount),
    from: getAddress(row.from_address),
    to: getAddress(row.to_address),
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
