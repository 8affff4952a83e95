import type { SettleOutcome, VerifiedPayment } from '@sigil/plugin-api';
import type { Replica } from '../../../core/db/replicas.ts';
import { doublingBackoff, RetryQueue, RetryWorker } from '../../../core/db/retries.ts';
import { fencePaymentsOfReplacedChain } from './chain-fence.ts';
import type { PaidResults, ResultToKeep } from './paid-results.ts';
import { SETTLEMENT_PENDING, SETTLEMENT_UNPROVEN, type PaymentReceipt } from './receipts.ts';
import {
  moveSettlement,
  paymentOf,
  SettledMarks,
  SETTLEMENT_COLUMNS,
  type PaymentServices,
  type SettlementAttemptRow,
  type SettlementRow,
  type SettlementState,
} from './settlement-records.ts';

/** Retry delays of a settlement that could not be decided (RPC down): 1 s doubling to 5 min. */
const BACKOFF = doublingBackoff(1000, 300_000);
/** How long a worker's claim on a settlement lasts unrenewed (another replica takes it only once its claimer is dead). */
const CLAIM_MS = 60_000;
/**
 * How long a call whose replica cannot settle waits for another replica to settle its payment (their
 * retry workers look every `retryIntervalMs`), and how often it looks at the record meanwhile.
 */
const QUEUED_WAIT_MS = 30_000;
const QUEUED_POLL_MS = 100;
/**
 * The most calls answered at their settlement's broadcast and not yet confirmed, per process: beyond
 * it calls are answered after the receipt, so a chain that falls behind holds the answers back
 * instead of a growing backlog of unconfirmed settlements.
 */
const MAX_UNCONFIRMED = 512;
/** The most payers remembered for a call answered at the broadcast and then unpaid. */
const MAX_UNPAID_PAYERS = 10_000;

/**
 * Moving the money of calls that succeeded: one settlement attempt and its outcome recorded, the
 * retry worker over the `settling` records (claimed atomically by a replica, so replicas do not
 * collide, and the claim renewed while an attempt runs) and start-up recovery of what a crash left
 * behind. A replica whose rail cannot settle now (`canSettle`: it holds none of the settling
 * accounts) claims no settlement: it leaves its calls' settlements, due in the database, to the
 * replicas that can, and waits for their outcome.
 */
export class Settlements {
  private readonly queue: RetryQueue<SettlementAttemptRow>;
  private readonly worker: RetryWorker<SettlementAttemptRow>;
  /** Record writes and settlements under way that no answer waits for. */
  private readonly writing = new Set<Promise<void>>();
  /** Settlements sent ahead whose calls were answered, not yet decided. */
  private unconfirmed = 0;
  /** Payers one of whose calls answered at the broadcast went unpaid (oldest first). */
  private readonly unpaidAfterAnswer = new Set<string>();
  /** The `settled` marks of first attempts, written while their answers leave (together per turn). */
  private readonly settledMarks: SettledMarks;

  constructor(
    private readonly deps: PaymentServices & {
      results: PaidResults;
      /** This replica: the settlements it claims name it. */
      replica: Replica;
      /**
       * How long a call may run: an `executing` record of this replica's older than this, which no
       * call here runs (or one recorded before records named their replica), is released. Another
       * replica's is released only once that replica is dead, and then at once.
       */
      staleAfterMs: number;
      /** How often due settlements are retried. */
      retryIntervalMs: number;
      /** Payments whose calls run in this process now: never stale, however long they take. */
      inFlight: ReadonlySet<string>;
    },
  ) {
    this.settledMarks = new SettledMarks(deps, 1);
    this.queue = new RetryQueue(deps.db, deps.clock, deps.replica, {
      table: 'payment_settlements',
      openStates: ['settling'],
      claimMs: CLAIM_MS,
      backoff: BACKOFF,
      order: 'next_attempt_at',
      batch: 100,
      columns: SETTLEMENT_COLUMNS,
    });
    this.worker = new RetryWorker({
      queue: { claimDue: () => this.claimDueIfSettling(), hold: (row, work) => this.queue.hold(row, work) },
      beforePass: async () => {
        await this.releaseStale();
        await deps.results.forgetExpired();
      },
      handle: async (row) => {
        await this.attempt(paymentOf(row), Number(row.attempts));
      },
      intervalMs: deps.retryIntervalMs,
      logger: deps.logger,
      failure: 'payments: settlement sweep failed',
    });
  }

  /**
   * The call succeeded: its record moves to `settling`, claimed by this request so the retry worker
   * does not settle it at the same time, with its result kept if the payer's quota has room (read by
   * the same write: one round trip before the money moves). `begun` is false when the record is no
   * longer `executing` (released as stale); `kept` says whether the result was kept.
   */
  async begin(
    payment: VerifiedPayment,
    toKeep: ResultToKeep | undefined,
  ): Promise<{ begun: boolean; kept: boolean }> {
    const write = this.writeSettling(payment, toKeep);
    // The mark is on its way: the rail signs the settlement meanwhile (it sends nothing before settle).
    const prepared =
      this.deps.rail.canSettle?.() === false ? undefined : this.deps.rail.prepareSettlement?.(payment);
    let written: { begun: boolean; kept: boolean };
    try {
      written = await write;
    } catch (err) {
      prepared?.discard();
      throw err;
    }
    if (!written.begun) prepared?.discard();
    return written;
  }

  private async writeSettling(
    payment: VerifiedPayment,
    toKeep: ResultToKeep | undefined,
  ): Promise<{ begun: boolean; kept: boolean }> {
    const settling = { state: 'settling' as const, ...this.queue.claimColumns() };
    if (!toKeep) return { begun: (await this.move(payment.id, ['executing'], settling)) === 1, kept: false };
    const { db, clock, results } = this.deps;
    const { room, columns } = results.keptIfRoom(toKeep);
    const moved = (await db
      .with(...room)
      .from('payment_settlements')
      .where({ id: payment.id, state: 'executing' })
      .update({ ...settling, ...columns, updated_at: clock.now().getTime() }, ['result_bytes'])) as {
      result_bytes: number | null;
    }[];
    const row = moved[0];
    return { begun: row !== undefined, kept: row?.result_bytes != null };
  }

  /**
   * The first settlement attempt, by the call whose `begin` claimed the record (the claim renewed
   * while it runs), its `settled` mark written while the answer leaves (see `attempt`). A rail that
   * sends settlements ahead (`send`, the x402 rail's `answerAfter: "broadcast"`) answers the call
   * once its transaction is accepted, with x402's `settlement_pending` and the transaction's hash;
   * the attempt then goes on after the answer, its outcome recorded as ever. Not while
   * MAX_UNCONFIRMED answered settlements are unconfirmed here (the chain falling behind slows the
   * answers down to its pace), nor for a payer one of whose settlements failed after its answer.
   */
  firstAttempt(payment: VerifiedPayment): Promise<PaymentReceipt> {
    const { rail } = this.deps;
    if (rail.canSettle?.() === false) return this.settledElsewhere(payment);
    const send = rail.send?.bind(rail);
    if (!send || this.unconfirmed >= MAX_UNCONFIRMED || this.unpaidAfterAnswer.has(payment.payer))
      return this.queue.hold(payment, () => this.attempt(payment, 0, true));
    return new Promise((answer, fail) => {
      const attempt = this.queue.hold(payment, async () => {
        const sent = await send(payment).catch(() => undefined);
        if (!sent) return this.attempt(payment, 0, true);
        const { network } = rail.terms();
        const { payer } = payment;
        const transaction = sent.transaction;
        answer({ success: false, errorReason: SETTLEMENT_PENDING, transaction, network, payer });
        const confirmed = this.confirmAnswered(payment, transaction);
        this.inBackground(
          confirmed,
          payment.id,
          'payments: a settlement sent ahead of its answer was not recorded; the retry worker will',
        );
        return confirmed;
      });
      attempt.then(answer, fail);
    });
  }

  /** The attempt of a settlement whose call was answered at its broadcast (see firstAttempt). */
  private async confirmAnswered(payment: VerifiedPayment, transaction: string): Promise<PaymentReceipt> {
    this.unconfirmed++;
    try {
      const receipt = await this.attempt(payment, 0, true);
      const undecided =
        receipt.errorReason === SETTLEMENT_PENDING || receipt.errorReason === SETTLEMENT_UNPROVEN;
      if (!receipt.success && !undecided) this.answeredUnpaid(payment, transaction, receipt.errorReason);
      return receipt;
    } finally {
      this.unconfirmed--;
    }
  }

  /** A call answered at its settlement's broadcast was not paid: its payer's next calls wait for the receipt. */
  private answeredUnpaid(payment: VerifiedPayment, transaction: string, reason: string | undefined): void {
    const payers = this.unpaidAfterAnswer;
    payers.add(payment.payer);
    for (const oldest of payers) {
      if (payers.size <= MAX_UNPAID_PAYERS) break;
      payers.delete(oldest);
    }
    this.deps.logger.error(
      { payment: payment.id, payer: payment.payer, transaction, reason },
      'payments: a call answered at its settlement’s broadcast was not paid; this payer’s calls now wait for the receipt',
    );
  }

  /**
   * The settlement of a call whose replica cannot settle now, by a replica that can: the record is
   * left due (unclaimed) for their retry workers, and the call waits, up to QUEUED_WAIT_MS, until
   * one settled it, failed it, or tried and must try again. Undecided then, the chain says: used for
   * this payment → settled (the mark follows), spent otherwise → refused, unused → pending (as when
   * the RPC is down); unreadable → unproven (the result is withheld until a settlement proves it).
   */
  private async settledElsewhere(payment: VerifiedPayment): Promise<PaymentReceipt> {
    const { db, rail } = this.deps;
    const { network } = rail.terms();
    const receipt = { network, payer: payment.payer };
    await this.queue.later(payment.id, 0);
    let row: Pick<SettlementRow, 'state' | 'transaction' | 'attempts'> | undefined;
    for (let waited = 0; waited <= QUEUED_WAIT_MS; waited += QUEUED_POLL_MS) {
      row = await db('payment_settlements')
        .where({ id: payment.id })
        .first('state', 'transaction', 'attempts');
      if (row?.state !== 'settling' || Number(row.attempts) > 0) break;
      await new Promise((resolve) => setTimeout(resolve, QUEUED_POLL_MS));
    }
    if (row?.state === 'settled') return { ...receipt, success: true, transaction: row.transaction ?? '' };
    if (row?.state !== 'settling')
      return { ...receipt, success: false, transaction: '', errorReason: 'settlement_failed' };
    const standing = await rail.status(payment).catch(() => undefined);
    if (standing?.used) return { ...receipt, success: true, transaction: standing.transaction ?? '' };
    const errorReason = !standing
      ? SETTLEMENT_UNPROVEN
      : standing.spent
        ? (standing.reason ?? 'settlement_failed')
        : SETTLEMENT_PENDING;
    return { ...receipt, success: false, transaction: '', errorReason };
  }

  /**
   * One settlement attempt of a `settling` record (after `previousAttempts`), and its outcome
   * recorded. With `answerFirst`, a settlement's `settled` mark is written while the answer leaves
   * (the chain holds the transfer and the record already says `settling`: should the write be lost
   * with the process, start-up recovery or the retry worker finds the transfer on chain and writes it).
   */
  private async attempt(
    payment: VerifiedPayment,
    previousAttempts: number,
    answerFirst = false,
  ): Promise<PaymentReceipt> {
    const { network } = this.deps.rail.terms();
    const outcome: SettleOutcome = await this.deps.rail.settle(payment).catch((err: Error) => ({
      status: 'retry' as const,
      reason: 'unreachable',
      message: err.message,
    }));
    const attempts = previousAttempts + 1;
    if (outcome.status === 'settled') {
      if (answerFirst && attempts === 1)
        this.inBackground(
          this.settledMarks.mark(payment.id, outcome.transaction),
          payment.id,
          'payments: a settled mark was not written; the retry worker will',
        );
      else
        await this.move(payment.id, ['settling'], {
          state: 'settled',
          transaction: outcome.transaction,
          attempts,
          reason: null,
        });
      return { success: true, transaction: outcome.transaction, network, payer: payment.payer };
    }
    if (outcome.status === 'rejected') {
      // Never paid for: its result is not kept for anyone to fetch.
      await this.move(payment.id, ['settling'], {
        state: 'failed',
        reason: outcome.message.slice(0, 500),
        attempts,
        result: null,
        result_bytes: null,
        result_expires_at: null,
      });
      this.deps.logger.warn({ payment: payment.id, reason: outcome.reason }, 'payments: settlement refused');
      return { success: false, transaction: '', network, payer: payment.payer, errorReason: outcome.reason };
    }
    await this.move(payment.id, ['settling'], {
      reason: outcome.message.slice(0, 500),
      ...this.queue.failureColumns(attempts),
    });
    const errorReason = outcome.authorizationUsed ? SETTLEMENT_UNPROVEN : SETTLEMENT_PENDING;
    this.deps.logger.warn(
      { payment: payment.id, reason: outcome.reason, attempts },
      'payments: settlement pending, will retry',
    );
    return {
      success: false,
      transaction: '',
      network,
      payer: payment.payer,
      errorReason,
    };
  }

  /**
   * Start-up: the records of a chain that was replaced are fenced (chain-fence.ts), calls left
   * unfinished by dead replicas are released, and the settlements due (those dead replicas left
   * under way among them; live replicas' claims are theirs) are completed now.
   */
  async recover(): Promise<{ released: number }> {
    const { logger } = this.deps;
    // An RPC down now does not stop the gateway: a real chain is not replaced, and the dev chain is
    // up before the gateway starts.
    await fencePaymentsOfReplacedChain(this.deps).catch((err: unknown) =>
      logger.warn(
        { err: (err as Error).message },
        'payments: cannot read the chain to check it is the one recorded; not checked this run',
      ),
    );
    const released = await this.releaseStale();
    await this.settleDue();
    return { released };
  }

  /** Settles every due `settling` record once; a failure is logged. */
  settleDue(): Promise<void> {
    return this.worker
      .pass()
      .catch((err: unknown) =>
        this.deps.logger.warn({ err: (err as Error).message }, 'payments: settlement sweep failed'),
      );
  }

  /** Retries due settlements in the background until `stop()`. */
  start(): void {
    this.worker.start();
  }

  /** Stops the retries and waits for the pass and the record writes under way. */
  async stop(): Promise<void> {
    await this.worker.stop();
    await Promise.all(this.writing);
  }

  /** The settlements due, when this replica can settle; none otherwise (the replicas that can settle them). */
  private async *claimDueIfSettling(): AsyncGenerator<SettlementAttemptRow> {
    if (this.deps.rail.canSettle?.() === false) return;
    yield* this.queue.claimDue();
  }

  /**
   * Releases the calls that will never finish: those of dead replicas, at once; this replica's own
   * that no call here runs, once older than `staleAfterMs` (and so those recorded before records named
   * their replica). A live replica's call is never released here, however long it runs.
   */
  private async releaseStale(): Promise<number> {
    const { db, clock, logger, staleAfterMs, inFlight, replica } = this.deps;
    const now = clock.now().getTime();
    const released = await db('payment_settlements')
      .where({ state: 'executing' })
      .andWhere((unfinished) =>
        unfinished
          .where((orphaned) =>
            orphaned.whereNotNull('claimed_by').whereNotIn('claimed_by', replica.claimersAlive()),
          )
          .orWhere((stale) =>
            stale
              .where((mine) => mine.whereNull('claimed_by').orWhere('claimed_by', replica.id))
              .andWhere('created_at', '<', now - staleAfterMs)
              .whereNotIn('id', [...inFlight]),
          ),
      )
      .update({
        state: 'released',
        reason: 'the call never finished (its process stopped)',
        updated_at: now,
      });
    if (released > 0) logger.info({ released }, 'payments: released calls that never finished');
    return released;
  }

  /** Work the answer does not wait for; stop() waits for it, and a failure is logged as `failure`. */
  private inBackground(work: Promise<unknown>, payment: string, failure: string): void {
    const tracked: Promise<void> = work
      .then(
        () => undefined,
        (err: Error) => this.deps.logger.warn({ payment, err: err.message }, failure),
      )
      .finally(() => this.writing.delete(tracked));
    this.writing.add(tracked);
  }

  private move(
    id: string,
    from: readonly SettlementState[],
    change: Partial<Omit<SettlementRow, 'id'>>,
  ): Promise<number> {
    return moveSettlement(this.deps, id, from, change);
  }
}
