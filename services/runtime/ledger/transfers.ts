import { randomBytes, randomUUID } from 'node:crypto';
import type { Knex } from 'knex';
import type { Address, Hex } from 'viem';
import { checksumAddress } from '../../../core/chain/address.ts';
import { SigilError } from '@sigil/plugin-api';
import type { Replica } from '../../../core/db/replicas.ts';
import { doublingBackoff, RetryQueue } from '../../../core/db/retries.ts';
import { toAmount } from './amounts.ts';
import type { SignedTransaction } from './signed-transaction.ts';
import { SpendRefused } from './errors.ts';
import type { Ledger } from './ledger.ts';
import {
  listTransfers,
  OPEN_STATES,
  openTransfers,
  readTransfer,
  transferByKey,
  transferOf,
  type Transfer,
  type TransferKind,
} from './transfer-records.ts';
import {
  checkDestination,
  checkWithdrawalAmount,
  refuseOverWithdrawalRate,
  type ForbiddenDestinations,
  type WithdrawalLimits,
} from './withdrawal-limits.ts';

/** How long a worker's claim on a transfer lasts unrenewed (another replica takes it only once its claimer is dead). */
const CLAIM_MS = 60_000;
/** Retry delays after an attempt failed (RPC down, …): 1 s doubling to 5 min. */
const BACKOFF = doublingBackoff(1000, 300_000);

/**
 * The records of transfers out of deposit addresses, and the ledger entries they make. Everything
 * here is database work under the wallet's lock; the chain side is the TransferWorker's, which takes
 * the open transfers that are due from here (a retry queue on ledger_transfers).
 */
export class Transfers {
  private readonly queue: RetryQueue<{ id: string }>;

  /** `replica`: this process, which the transfers it claims name. */
  constructor(
    private readonly ledger: Ledger,
    replica: Replica,
  ) {
    this.queue = new RetryQueue(ledger.db, ledger.clock, replica, {
      table: 'ledger_transfers',
      openStates: OPEN_STATES,
      claimMs: CLAIM_MS,
      backoff: BACKOFF,
      order: 'created_at',
      batch: 20,
      columns: ['id'],
    });
  }

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
    const wallet = checksumAddress(input.wallet);
    const { limits, amount } = input;
    const to = await checkDestination(input.to, input.forbidden);
    checkWithdrawalAmount(amount, limits);
    return this.ledger.withWallet(wallet, async (trx, balance) => {
      const first = await transferByKey(trx, wallet, 'withdrawal', input.idempotencyKey);
      if (first) {
        if (first.amount !== amount || first.to !== to) {
          throw new SigilError('conflict', 'This idempotency key already requested another withdrawal', {
            hint: 'Use a new idempotency key for a new withdrawal',
            details: { withdrawalId: first.id },
          });
        }
        return { transfer: first, replayed: true };
      }
      await refuseOverWithdrawalRate(trx, { wallet, amount, limits, now: this.ledger.clock.now() });
      if (amount > balance.available) {
        throw new SpendRefused('available', { requested: amount, remaining: balance.available });
      }
      const transfer = await this.insert(trx, {
        wallet,
        kind: 'withdrawal',
        amount,
        from: input.from,
        to,
        idempotencyKey: input.idempotencyKey,
        validBefore: input.head.timestamp + BigInt(limits.authorizationTtlSeconds),
        fromBlock: input.head.block,
      });
      await this.ledger.append(trx, {
        wallet,
        kind: 'withdrawal_hold',
        amount,
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
    const wallet = checksumAddress(input.wallet);
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
      /** Null: the transaction recorded was for a step left behind (the transfer, once cancelling). */
      signed?: null;
    },
  ): Promise<void> {
    await this.openRow(id).update({
      ...(change.signed === null ? { signed_tx: null, signed_nonce: null } : {}),
      ...(change.state === undefined ? {} : { state: change.state }),
      ...(change.txHash === undefined ? {} : { tx_hash: change.txHash }),
      ...(change.cancelTxHash === undefined ? {} : { cancel_tx_hash: change.cancelTxHash }),
      ...(change.sentAt === undefined ? {} : { sent_at: change.sentAt }),
      ...(change.reason === undefined ? {} : { reason: change.reason?.slice(0, 500) ?? null }),
      updated_at: this.ledger.now(),
    });
  }

  /**
   * Records the operator's transaction for the transfer's step, signed and not yet sent, in `trx`
   * (the sender lease's fenced transaction): what is sent is always what was recorded first.
   */
  async recordSigned(trx: Knex.Transaction, id: string, signed: SignedTransaction): Promise<void> {
    await trx('ledger_transfers')
      .where({ id })
      .whereIn('state', OPEN_STATES)
      .update({ signed_tx: signed.raw, signed_nonce: signed.nonce, updated_at: this.ledger.now() });
  }

  /** The open transfers that are due, each claimed just before it is handed out, so replicas do not race. */
  async *claimDue(): AsyncGenerator<Transfer> {
    for await (const { id } of this.queue.claimDue()) {
      const transfer = await this.get(id);
      if (transfer) yield transfer;
    }
  }

  /** Runs `work` on a transfer this replica claimed, renewing the claim while it runs. */
  hold<T>(transfer: Transfer, work: () => Promise<T>): Promise<T> {
    return this.queue.hold(transfer, work);
  }

  /** Looks at an open transfer again in `ms` (it waits on the chain). */
  later(id: string, ms: number): Promise<void> {
    return this.queue.later(id, ms);
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

  /** Its `attempts`-th attempt failed (RPC down, …): tried again after a backoff. */
  async attemptFailed(id: string, attempts: number): Promise<void> {
    await this.openRow(id).update(this.queue.failureColumns(attempts));
  }

  get(id: string, wallet?: string): Promise<Transfer | undefined> {
    return readTransfer(this.db, id, wallet);
  }

  /** A wallet's transfers of one kind, newest first, by pages (see listTransfers). */
  list(
    wallet: string,
    kind: TransferKind,
    options: { limit: number; cursor?: string },
  ): Promise<{ transfers: Transfer[]; nextCursor: string | undefined }> {
    return listTransfers(this.db, wallet, kind, options);
  }

  /** Open transfers, of a wallet when given (what the balance counts as in flight). */
  open(wallet?: string): Promise<Transfer[]> {
    return openTransfers(this.db, wallet);
  }

  /** The transfer's row while it is open (a finished transfer is never written again). */
  private openRow(id: string) {
    return this.db('ledger_transfers').where({ id }).whereIn('state', OPEN_STATES);
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
      signed_tx: null,
      signed_nonce: null,
    });
  }
}
