import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';
import {
  type PaymentRailV1,
  type PaymentResource,
  type PaymentTerms,
  type SettleOutcome,
  SigilError,
  type VerifiedPayment,
  type X402PaymentRequired,
} from '@sigil/plugin-api';
import type { Logger } from '../../../core/log.ts';
import { encodePaymentRequiredHeader } from '@x402/core/http';
import {
  DEFAULT_RESULT_MAX_BYTES,
  DEFAULT_RESULT_MAX_BYTES_PER_PAYER,
  DEFAULT_RESULT_RETENTION_MS,
  PaidResults,
} from './paid-results.ts';
import { fencePaymentsOfReplacedChain } from './chain-fence.ts';
import { Reconciler, type Reconciliation } from './reconciler.ts';

/** Where x402's MCP transport carries a payment in `params._meta`, and the settlement in `result._meta`. */
export const PAYMENT_META_KEY = 'x402/payment';
export const PAYMENT_RESPONSE_META_KEY = 'x402/payment-response';

/**
 * A payment's life, one row per authorization: `executing` (verified and reserved: the call runs) →
 * `settling` (the call succeeded; the money is moving) → `settled`; or `released` (the call failed or
 * never finished: no charge), or `failed` (the call succeeded but the payment can no longer settle).
 */
export type SettlementState = 'executing' | 'settling' | 'settled' | 'released' | 'failed';

interface SettlementRow {
  id: string;
  state: SettlementState;
  payer: string;
  amount: string;
  resource: string;
  wallet: string | null;
  authorization: string;
  valid_before: number | string;
  transaction: string | null;
  reason: string | null;
  attempts: number;
  next_attempt_at: number | string;
  created_at: number | string;
  updated_at: number | string;
  /** The call's result (JSON), kept for its payer from the settlement's start until `result_expires_at`. */
  result?: string | null;
  result_bytes?: number | null;
  result_expires_at?: number | string | null;
}

/** The columns a settlement attempt needs (not the kept result, which may be large). */
const SETTLEMENT_COLUMNS = [
  'id',
  'state',
  'payer',
  'amount',
  'authorization',
  'valid_before',
  'attempts',
  'next_attempt_at',
] as const;

/** x402 v2 `SettleResponse`: what a paid response carries (PAYMENT-RESPONSE, or `_meta`). */
export interface PaymentReceipt {
  success: boolean;
  transaction: string;
  network: string;
  payer: string;
  errorReason?: string;
  /** Says when the result was not kept for its payer to fetch again (`io.sigil/paid-result`). */
  extensions?: Record<string, unknown>;
}

/** A receipt's reason while the settlement is undecided and nothing shows the authorization used. */
const SETTLEMENT_PENDING = 'settlement_pending';
/** The reason of a 402 whose authorization is used on chain, not yet proven to have paid us. */
const SETTLEMENT_UNPROVEN = 'settlement_unproven';
/** Where a 402's PaymentRequired names the payment whose result is kept (x402 v2 `extensions`). */
export const PAID_RESULT_EXTENSION = 'io.sigil/paid-result';

/** Retry delays of a settlement that could not be decided (RPC down): 1 s doubling to 5 min. */
const backoffMs = (attempts: number): number => Math.min(1000 * 2 ** Math.max(0, attempts - 1), 300_000);
/** How long a worker owns a due settlement before another replica may take it over. */
const CLAIM_MS = 60_000;

/**
 * Charges per call on a payment rail, exactly: a payment is verified and reserved (its id unique in
 * the database, so the same authorization never runs twice, on any replica) before the call runs;
 * its record moves to `settling` before the money moves; only a successful call settles. Settlements
 * that could not finish are retried with backoff; start-up recovers what a crash left behind; the
 * reconciler compares the records with the chain.
 */
export class Payments {
  private worker: NodeJS.Timeout | undefined;
  private reconcileTimer: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | undefined;
  /** Payments whose calls run in this process now: never stale, however long they take. */
  private readonly inFlight = new Set<string>();
  /** Record writes under way that no answer waits for. */
  private readonly writing = new Set<Promise<void>>();
  private readonly results: PaidResults;
  private readonly reconciler: Reconciler;

  constructor(
    private readonly deps: {
      rail: PaymentRailV1;
      db: Database;
      clock: Clock;
      logger: Logger;
      /**
       * How long a call may run: an `executing` record older than this belongs to a process that died
       * (other replicas' live calls are younger), so it is released.
       */
      staleAfterMs: number;
      /** How often due settlements are retried; 1 s by default. */
      retryIntervalMs?: number;
      /** How often the records are reconciled with the chain (mismatches are logged as errors); 10 min by default. */
      reconcileIntervalMs?: number;
      /**
       * How long a paid call's result is kept for its payer to fetch again (`paidResult`), from the
       * start of its settlement; a day by default, 0 keeps none.
       */
      resultRetentionMs?: number;
      /** The largest result kept (serialized bytes); 256 KB by default. */
      resultMaxBytes?: number;
      /** The bytes of unexpired results kept per payer; 16 MB by default. */
      resultMaxBytesPerPayer?: number;
      /** Seals kept results (AES-256-GCM) when set: `database.dataKey`. */
      dataKey?: string;
      /** Added to the hint of a payment asked for: how to pay here (`gateway.paymentHint`). */
      hint?: string;
    },
  ) {
    this.reconciler = new Reconciler({ rail: deps.rail, db: deps.db, logger: deps.logger });
    this.results = new PaidResults({
      db: deps.db,
      clock: deps.clock,
      logger: deps.logger,
      retentionMs: deps.resultRetentionMs ?? DEFAULT_RESULT_RETENTION_MS,
      maxBytes: deps.resultMaxBytes ?? DEFAULT_RESULT_MAX_BYTES,
      maxBytesPerPayer: deps.resultMaxBytesPerPayer ?? DEFAULT_RESULT_MAX_BYTES_PER_PAYER,
      dataKey: deps.dataKey,
    });
  }

  terms(): PaymentTerms {
    return this.deps.rail.terms();
  }

  /** The refusal of an unpaid or badly paid call: 402 with x402's PAYMENT-REQUIRED. */
  paymentRequired(resource: PaymentResource, reason?: { code: string; message: string }): SigilError {
    const code = reason?.code ?? 'payment_required';
    const required = this.deps.rail.paymentRequired(resource, code);
    const terms = this.terms();
    const message = reason?.message ?? `Payment required: this call costs ${priceOf(terms)}`;
    return paymentError(required, message, {
      reason: code,
      hint: this.deps.hint === undefined ? HOW_TO_PAY : `${HOW_TO_PAY}. ${this.deps.hint}`,
    });
  }

  /**
   * Verifies `payload` for `resource` and reserves it. Throws 402 (and nothing is recorded) when the
   * payment is missing, invalid, or already used or in flight.
   *
   * A rail that can `peek` lets the reservation be written while the payment is verified (its commit
   * and the verification overlap); a payment that fails verification has its reservation dropped. A
   * payment's id is known to no one else until it is presented (x402 on EVM: the payer's random
   * EIP-3009 nonce), so a forged payment cannot hold a real one's place.
   */
  async reserve(
    payload: unknown,
    resource: PaymentResource,
    wallet: string | undefined,
  ): Promise<VerifiedPayment> {
    if (payload === undefined) throw this.paymentRequired(resource);
    const claimed = this.deps.rail.peek?.(payload);
    const early = claimed ? this.insertReservation(claimed, resource, wallet) : undefined;
    early?.catch(() => undefined); // awaited below, after the verification: its failure is reported there
    let payment: VerifiedPayment;
    try {
      payment = await this.verified(payload, resource);
    } catch (err) {
      await this.dropReservation(early, claimed);
      throw err;
    }
    let reserved = claimed?.id === payment.id ? early : undefined;
    if (!reserved) {
      await this.dropReservation(early, claimed);
      reserved = this.insertReservation(payment, resource, wallet);
    }
    if (!(await reserved)) {
      throw this.paymentRequired(resource, {
        code: 'payment_already_used',
        message:
          'Payment refused: this payment authorization was presented before; sign a new payment for this call',
      });
    }
    return payment;
  }

  /** The rail's verification, and a window long enough for the call: else 402 with the reason. */
  private async verified(payload: unknown, resource: PaymentResource): Promise<VerifiedPayment> {
    const outcome = await this.deps.rail.verify(payload);
    if (!outcome.valid) {
      throw this.paymentRequired(resource, {
        code: outcome.reason,
        message: `Payment refused: ${outcome.message}`,
      });
    }
    this.refuseShortWindow(outcome.payment, resource);
    return outcome.payment;
  }

  /** An authorization that lapses before the call could finish would run a tool it cannot pay for. */
  private refuseShortWindow(payment: VerifiedPayment, resource: PaymentResource): void {
    if (payment.validBefore * 1000 >= this.deps.clock.now().getTime() + this.deps.staleAfterMs) return;
    throw this.paymentRequired(resource, {
      code: 'authorization_window_too_short',
      message: `Payment refused: the authorization must stay valid for at least ${Math.ceil(this.deps.staleAfterMs / 1000)} s, the longest a call and its settlement may take`,
    });
  }

  /** Writes the `executing` record of a payment: true, or false when its id is already recorded. */
  private async insertReservation(
    payment: VerifiedPayment,
    resource: PaymentResource,
    wallet: string | undefined,
  ): Promise<boolean> {
    const now = this.deps.clock.now().getTime();
    const row: SettlementRow = {
      id: payment.id,
      state: 'executing',
      payer: payment.payer,
      amount: payment.amount.toString(),
      resource: resource.url.slice(0, 300),
      wallet: wallet ?? null,
      authorization: JSON.stringify(payment.authorization),
      valid_before: payment.validBefore,
      transaction: null,
      reason: null,
      attempts: 0,
      next_attempt_at: 0,
      created_at: now,
      updated_at: now,
    };
    const inserted = await this.deps
      .db('payment_settlements')
      .insert(row)
      .onConflict('id')
      .ignore()
      .returning('id');
    return inserted.length > 0;
  }

  /** Removes a reservation written for a payment that then failed: as if it had never been presented. */
  private async dropReservation(
    reservation: Promise<boolean> | undefined,
    payment: VerifiedPayment | undefined,
  ): Promise<void> {
    if (!reservation || !payment || !(await reservation.catch(() => false))) return;
    await this.deps.db('payment_settlements').where({ id: payment.id, state: 'executing' }).delete();
  }

  /**
   * Runs one paid operation: reserve, `work`, then settle if it succeeded or release if it failed or
   * threw. The receipt is absent when nothing was charged.
   *
   * The settlement is sent, and its receipt awaited, after the work and before its result leaves: a
   * payer who cancels its authorization while the work runs (EIP-3009 `cancelAuthorization`) makes
   * the settlement fail, and then gets the 402, never the result. Settling (or broadcasting) before
   * the work would shut that door earlier, but would charge for calls that then fail: an EIP-3009
   * transfer cannot be refunded, and only a successful call is paid for. What a cancelling payer
   * gains is the work's running time, which the call timeout and the per-caller limits bound.
   */
  async run<T>(
    payload: unknown,
    resource: PaymentResource,
    wallet: string | undefined,
    work: () => Promise<{ value: T; succeeded: boolean }>,
  ): Promise<{ value: T; receipt?: PaymentReceipt }> {
    const payment = await this.reserve(payload, resource, wallet);
    this.inFlight.add(payment.id);
    try {
      let outcome: { value: T; succeeded: boolean };
      try {
        outcome = await work();
      } catch (err) {
        await this.release(payment, (err as Error).message);
        throw err;
      }
      if (!outcome.succeeded) {
        await this.release(payment, 'the call reported an error');
        return { value: outcome.value };
      }
      const receipt = await this.settle(payment, resource, outcome.value);
      return receipt ? { value: outcome.value, receipt } : { value: outcome.value };
    } finally {
      this.inFlight.delete(payment.id);
    }
  }

  /** The call failed or was refused after the reservation: no charge, ever, for this payment. */
  async release(payment: VerifiedPayment, reason: string): Promise<void> {
    await this.move(payment.id, ['executing'], { state: 'released', reason: reason.slice(0, 500) });
  }

  /**
   * The call succeeded: settles. Settled → a receipt; not decidable now (RPC down) → a pending receipt
   * and the worker retries; refused for good → throws 402, and the call's result must be withheld.
   * Undefined, and nothing charged, when the record is no longer `executing`: another replica took
   * the call for a dead process's and released it, and a released payment never moves money.
   *
   * `result` (already redacted and proven) is written with the `settling` mark, before any money
   * moves: should the answer never reach the payer (the process dies mid-settlement, the connection
   * drops), the payer fetches it once settled (`paidResult`), until the retention ends.
   */
  async settle(
    payment: VerifiedPayment,
    resource: PaymentResource,
    result?: unknown,
  ): Promise<PaymentReceipt | undefined> {
    const now = this.deps.clock.now().getTime();
    const kept = await this.results.keep(payment.id, payment.payer, result);
    // Claimed by this request for CLAIM_MS, so the retry worker does not settle it at the same time.
    const claimed = await this.move(payment.id, ['executing'], {
      state: 'settling',
      next_attempt_at: now + CLAIM_MS,
      ...kept.columns,
    });
    if (claimed === 0) {
      this.deps.logger.warn(
        { payment: payment.id },
        'payments: the call finished after its record was released as stale; not charged',
      );
      return undefined;
    }
    const receipt = await this.attempt(payment, 0, true);
    // Pending only while nothing shows the authorization used (the RPC unreachable before the nonce
    // could be read, or our transfer not yet mined): the result is served with the pending receipt
    // and the worker settles it. Once the nonce is used, only our proven transfer serves it.
    if (receipt.success || receipt.errorReason === SETTLEMENT_PENDING) {
      if (kept.notKept === undefined) return receipt;
      // The payer learns that this result cannot be fetched again, should it lose it.
      const notKept = { paymentId: payment.id, kept: false, reason: kept.notKept };
      return { ...receipt, extensions: { [PAID_RESULT_EXTENSION]: notKept } };
    }
    if (receipt.errorReason === SETTLEMENT_UNPROVEN)
      throw this.unproven(payment, resource, kept.notKept === undefined);
    throw this.paymentRequired(resource, {
      code: receipt.errorReason ?? 'settlement_failed',
      message: 'Payment could not be settled: nothing was charged, and the result is withheld',
    });
  }

  /**
   * The 402 of a call whose authorization the chain shows used, with no proof yet that it paid us
   * (the payer may have cancelled it): the result stays kept, and its payer fetches it once the
   * retry worker proves the settlement.
   */
  private unproven(payment: VerifiedPayment, resource: PaymentResource, kept: boolean): SigilError {
    const required = this.deps.rail.paymentRequired(resource, SETTLEMENT_UNPROVEN);
    const resultPath = `/api/payments/${encodeURIComponent(payment.id)}/result`;
    const extension = { paymentId: payment.id, kept, ...(kept ? { resultPath } : {}) };
    return paymentError(
      { ...required, extensions: { [PAID_RESULT_EXTENSION]: extension } },
      'Payment not proven yet: the authorization is used on chain, but nothing shows yet that it paid for this call; the result is withheld',
      {
        reason: SETTLEMENT_UNPROVEN,
        hint: kept
          ? `Once the settlement is proven, the paying wallet fetches the result at GET ${resultPath} (signed in)`
          : 'The result was not kept (over the size or per-payer limits); nothing is charged unless the settlement is proven',
        paymentId: payment.id,
      },
    );
  }

  /**
   * Start-up: the records of a chain that was replaced are fenced (chain-fence.ts), settlements that
   * were under way are completed now, and calls left unfinished by a dead process are released (those
   * of live replicas are younger than `staleAfterMs`; the worker releases the rest as they age).
   */
  async recover(): Promise<{ released: number; settling: number }> {
    // An RPC down now does not stop the gateway: a real chain is not replaced, and the dev chain is
    // up before the gateway starts.
    await fencePaymentsOfReplacedChain(this.deps).catch((err: unknown) =>
      this.deps.logger.warn(
        { err: (err as Error).message },
        'payments: cannot read the chain to check it is the one recorded; not checked this run',
      ),
    );
    const settling = await this.deps
      .db('payment_settlements')
      .where({ state: 'settling' })
      .update({ next_attempt_at: 0 });
    const released = await this.releaseStale();
    if (settling > 0) this.deps.logger.info({ settling }, 'payments: completing settlements left under way');
    await this.settleDue();
    return { released, settling };
  }

  private async releaseStale(): Promise<number> {
    const now = this.deps.clock.now().getTime();
    const released = await this.deps
      .db('payment_settlements')
      .where({ state: 'executing' })
      .andWhere('created_at', '<', now - this.deps.staleAfterMs)
      .whereNotIn('id', [...this.inFlight])
      .update({
        state: 'released',
        reason: 'the call never finished (its process stopped)',
        updated_at: now,
      });
    if (released > 0) this.deps.logger.info({ released }, 'payments: released calls that never finished');
    return released;
  }

  /** The kept result of a settled call, for its payer only (see PaidResults.fetch). */
  paidResult(id: string, caller: string): Promise<{ result: unknown; receipt: PaymentReceipt }> {
    return this.results.fetch(id, caller, this.terms().network);
  }

  /** Retries due settlements in the background until `stop()`. */
  start(): void {
    this.worker ??= setInterval(() => void this.settleDue(), this.deps.retryIntervalMs ?? 1000);
    this.worker.unref();
    this.reconcileTimer ??= setInterval(
      () =>
        void this.reconcile().catch((err: Error) =>
          this.deps.logger.warn({ err: err.message }, 'payments: reconciliation could not run'),
        ),
      this.deps.reconcileIntervalMs ?? 600_000,
    );
    this.reconcileTimer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.worker);
    clearInterval(this.reconcileTimer);
    this.worker = undefined;
    this.reconcileTimer = undefined;
    await Promise.all([this.sweeping, ...this.writing]);
  }

  /** Settles every due `settling` record once (claimed atomically, so replicas do not collide). */
  settleDue(): Promise<void> {
    this.sweeping ??= (async () => {
      try {
        await this.releaseStale();
        await this.results.forgetExpired();
        const now = this.deps.clock.now().getTime();
        const due = (await this.deps
          .db('payment_settlements')
          .select(...SETTLEMENT_COLUMNS)
          .where({ state: 'settling' })
          .andWhere('next_attempt_at', '<=', now)
          .orderBy('next_attempt_at')
          .limit(100)) as SettlementRow[];
        for (const row of due) {
          const claimed = await this.deps
            .db('payment_settlements')
            .where({ id: row.id, state: 'settling', next_attempt_at: row.next_attempt_at })
            .update({ next_attempt_at: now + CLAIM_MS });
          if (claimed === 1) await this.attempt(paymentOf(row), Number(row.attempts));
        }
      } catch (err) {
        this.deps.logger.warn({ err: (err as Error).message }, 'payments: settlement sweep failed');
      } finally {
        this.sweeping = undefined;
      }
    })();
    return this.sweeping;
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
    const { network } = this.terms();
    const outcome: SettleOutcome = await this.deps.rail.settle(payment).catch((err: Error) => ({
      status: 'retry' as const,
      reason: 'unreachable',
      message: err.message,
    }));
    const attempts = previousAttempts + 1;
    if (outcome.status === 'settled') {
      const recorded = this.move(payment.id, ['settling'], {
        state: 'settled',
        transaction: outcome.transaction,
        attempts,
        reason: null,
      });
      if (answerFirst) this.inBackground(recorded, payment.id);
      else await recorded;
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
      attempts,
      reason: outcome.message.slice(0, 500),
      next_attempt_at: this.deps.clock.now().getTime() + backoffMs(attempts),
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

  /** Compares the records with the settlements the chain holds (see Reconciler.reconcile). */
  reconcile(): Promise<Reconciliation> {
    return this.reconciler.reconcile();
  }

  /** A record write the answer does not wait for; stop() waits for it. */
  private inBackground(write: Promise<unknown>, payment: string): void {
    const tracked: Promise<void> = write
      .then(
        () => undefined,
        (err: Error) =>
          this.deps.logger.warn(
            { payment, err: err.message },
            'payments: a settled mark was not written; the retry worker will',
          ),
      )
      .finally(() => this.writing.delete(tracked));
    this.writing.add(tracked);
  }

  private async move(
    id: string,
    from: readonly SettlementState[],
    change: Partial<Omit<SettlementRow, 'id'>>,
  ): Promise<number> {
    return this.deps
      .db('payment_settlements')
      .where({ id })
      .whereIn('state', from)
      .update({ ...change, updated_at: this.deps.clock.now().getTime() });
  }
}

function paymentOf(row: SettlementRow): VerifiedPayment {
  return {
    id: row.id,
    payer: row.payer,
    amount: BigInt(row.amount),
    validBefore: Number(row.valid_before),
    authorization: JSON.parse(row.authorization) as Record<string, unknown>,
  };
}

/** How any x402 client pays, over either transport. */
const HOW_TO_PAY =
  'Pay with x402: sign one of the terms in `accepts` (REST: the PAYMENT-REQUIRED header; MCP: the error data) and send the payment in the PAYMENT-SIGNATURE header (REST) or params._meta["x402/payment"] (MCP)';

/**
 * A 402: `details.reason` is the refusal's stable code (`payment_required` when nothing was paid; the
 * same as the PaymentRequired's `error`), the message one sentence a payer can act on.
 */
const priceOf = (terms: PaymentTerms): string =>
  `${terms.pricePerCall} base units of ${terms.asset.name} on ${terms.network}`;

function paymentError(
  required: X402PaymentRequired,
  message: string,
  refusal: { reason: string; hint: string; paymentId?: string },
): SigilError {
  return new SigilError('payment_required', message, {
    hint: refusal.hint,
    details: {
      reason: refusal.reason,
      paymentRequired: required,
      ...(refusal.paymentId === undefined ? {} : { paymentId: refusal.paymentId }),
    },
    headers: { 'PAYMENT-REQUIRED': encodePaymentRequiredHeader(required as never) },
  });
}
