import { LeasedPass } from '../../../core/db/leased-pass.ts';
import type { DatabaseLeases } from '../../../core/db/leases.ts';
import type { Replica } from '../../../core/db/replicas.ts';
import type { PaymentResource, PaymentTerms, SigilError, VerifiedPayment } from '@sigil/plugin-api';
import {
  DEFAULT_RESULT_MAX_BYTES,
  DEFAULT_RESULT_MAX_BYTES_PER_PAYER,
  DEFAULT_RESULT_RETENTION_MS,
  PaidResults,
} from './paid-results.ts';
import {
  PAID_RESULT_EXTENSION,
  SETTLEMENT_PENDING,
  SETTLEMENT_UNPROVEN,
  type PaymentReceipt,
} from './receipts.ts';
import { Reconciler, type Reconciliation } from './reconciler.ts';
import { Refusals } from './refusals.ts';
import { Reservations } from './reservations.ts';
import { moveSettlement, type PaymentServices } from './settlement-records.ts';
import { Settlements } from './settlements.ts';

/**
 * Charges per call on a payment rail, exactly: a payment is verified and reserved (its id unique in
 * the database, so the same authorization never runs twice, on any replica) before the call runs;
 * its record moves to `settling` before the money moves; only a successful call settles. Settlements
 * that could not finish are retried with backoff; start-up recovers what a crash left behind; the
 * reconciler compares the records with the chain, on one replica per interval.
 */
export class Payments {
  /** Payments whose calls run in this process now: never stale, however long they take. */
  private readonly inFlight = new Set<string>();
  private readonly refusals: Refusals;
  private readonly reservations: Reservations;
  private readonly settlements: Settlements;
  private readonly results: PaidResults;
  private readonly reconciler: Reconciler;
  private readonly reconciliation: LeasedPass;

  constructor(
    private readonly deps: PaymentServices & {
      /** This replica: the settlements it claims name it, and it takes the reconciliation's leases. */
      replica: Replica;
      leases: DatabaseLeases;
      /** How long the lease of an interval's reconciliation lasts unrenewed (`database.leaseSeconds`). */
      leaseMs: number;
      /**
       * How long a call may run: an `executing` record of this replica's older than this, which no
       * call here runs, is released; another replica's only once that replica is dead.
       */
      staleAfterMs: number;
      /** How often due settlements are retried; 1 s by default. */
      retryIntervalMs?: number;
      /**
       * How often the records are reconciled with the chain, by one replica each interval (mismatches
       * are logged as errors); 10 min by default.
       */
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
    this.refusals = new Refusals({ rail: deps.rail, hint: deps.hint });
    this.reservations = new Reservations({ ...deps, refusals: this.refusals });
    this.results = new PaidResults({
      db: deps.db,
      clock: deps.clock,
      logger: deps.logger,
      retentionMs: deps.resultRetentionMs ?? DEFAULT_RESULT_RETENTION_MS,
      maxBytes: deps.resultMaxBytes ?? DEFAULT_RESULT_MAX_BYTES,
      maxBytesPerPayer: deps.resultMaxBytesPerPayer ?? DEFAULT_RESULT_MAX_BYTES_PER_PAYER,
      dataKey: deps.dataKey,
    });
    this.settlements = new Settlements({
      ...deps,
      results: this.results,
      retryIntervalMs: deps.retryIntervalMs ?? 1000,
      inFlight: this.inFlight,
    });
    this.reconciler = new Reconciler(deps);
    this.reconciliation = new LeasedPass({
      leases: deps.leases,
      holder: deps.replica.id,
      name: 'payments:reconcile',
      job: (held) => this.reconciler.reconcile(held),
      intervalMs: deps.reconcileIntervalMs ?? 600_000,
      leaseMs: deps.leaseMs,
      clock: deps.clock,
      logger: deps.logger,
      failure: 'payments: reconciliation could not run',
    });
  }

  terms(): PaymentTerms {
    return this.deps.rail.terms();
  }

  /** The refusal of an unpaid or badly paid call: 402 with x402's PAYMENT-REQUIRED. */
  paymentRequired(
    resource: PaymentResource,
    reason?: { code: string; message: string },
  ): Promise<SigilError> {
    return this.refusals.paymentRequired(resource, reason);
  }

  /**
   * Runs one paid operation: reserve, `work`, then settle if it succeeded or release if it failed or
   * threw; withdraw the reservation if it is `unfinished` (the same payment pays for the retry that
   * finishes it). The receipt is absent when nothing was charged.
   *
   * The settlement is sent, and its receipt awaited, after the work and before its result leaves: a
   * payer who cancels its authorization while the work runs (EIP-3009 `cancelAuthorization`) makes
   * the settlement fail, and then gets the 402, never the result. Settling (or broadcasting) before
   * the work would shut that door earlier, but would charge for calls that then fail: an EIP-3009
   * transfer cannot be refunded, and only a successful call is paid for. What a cancelling payer
   * gains is the work's running time, which the call timeout and the per-caller limits bound. A rail
   * that sends settlements ahead (`send`, x402's `answerAfter: "broadcast"`, an operator's choice)
   * answers before the receipt: such a payer then gets one result unpaid (see Settlements.firstAttempt).
   */
  async run<T>(
    payload: unknown,
    resource: PaymentResource,
    wallet: string | undefined,
    work: () => Promise<{ value: T; succeeded: boolean; unfinished?: boolean }>,
  ): Promise<{ value: T; receipt?: PaymentReceipt }> {
    // In flight from its record's insert on, so the stale sweep never releases it under the call.
    const payment = await this.reservations.reserve(payload, resource, wallet, this.inFlight);
    try {
      let outcome: { value: T; succeeded: boolean; unfinished?: boolean };
      try {
        outcome = await work();
      } catch (err) {
        await this.release(payment, (err as Error).message);
        throw err;
      }
      if (outcome.unfinished) {
        // The call awaits the client's input (MCP 2026-07-28 `input_required`): nothing is charged,
        // and the same payment pays for the retry that completes it.
        await this.reservations.withdraw(payment);
        return { value: outcome.value };
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
    await moveSettlement(this.deps, payment.id, ['executing'], {
      state: 'released',
      reason: reason.slice(0, 500),
    });
  }

  /**
   * The call succeeded: settles. Settled → a receipt; not decidable now (RPC down) → a pending receipt
   * and the worker retries; refused for good → throws 402, and the call's result must be withheld.
   * Undefined, and nothing charged, when the record is no longer `executing`: this replica was taken
   * for dead (its heartbeat stopped) and its call released, and a released payment never moves money.
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
    const prepared = this.results.prepare(payment.id, payment.payer, result);
    const { begun, kept } = await this.settlements.begin(payment, prepared.toKeep);
    if (!begun) {
      this.deps.logger.warn(
        { payment: payment.id },
        'payments: the call finished after its record was released as stale; not charged',
      );
      return undefined;
    }
    const notKept = prepared.notKept ?? (prepared.toKeep && !kept ? 'payer_quota_full' : undefined);
    const receipt = await this.settlements.firstAttempt(payment);
    // Pending only while nothing shows the authorization used (the RPC unreachable before the nonce
    // could be read, or our transfer not yet mined): the result is served with the pending receipt
    // and the worker settles it. Once the nonce is used, only our proven transfer serves it.
    if (receipt.success || receipt.errorReason === SETTLEMENT_PENDING) {
      if (notKept === undefined) return receipt;
      // The payer learns that this result cannot be fetched again, should it lose it.
      const extension = { paymentId: payment.id, kept: false, reason: notKept };
      return { ...receipt, extensions: { [PAID_RESULT_EXTENSION]: extension } };
    }
    if (receipt.errorReason === SETTLEMENT_UNPROVEN)
      throw await this.refusals.unproven(payment, resource, notKept === undefined);
    throw await this.paymentRequired(resource, {
      code: receipt.errorReason ?? 'settlement_failed',
      message: 'Payment could not be settled: nothing was charged, and the result is withheld',
    });
  }

  /** Start-up recovery of what a crash left behind (see Settlements.recover). */
  recover(): Promise<{ released: number }> {
    return this.settlements.recover();
  }

  /** The kept result of a settled call, for its payer only (see PaidResults.fetch). */
  paidResult(id: string, caller: string): Promise<{ result: unknown; receipt: PaymentReceipt }> {
    return this.results.fetch(id, caller, this.terms().network);
  }

  /**
   * Retries due settlements and reconciles with the chain (this interval's, unless another replica
   * has) in the background until `stop()`.
   */
  start(): void {
    this.settlements.start();
    this.reconciliation.start();
  }

  async stop(): Promise<void> {
    await Promise.all([this.settlements.stop(), this.reconciliation.stop()]);
  }

  /** Compares the records with the settlements the chain holds (see Reconciler.reconcile). */
  reconcile(): Promise<Reconciliation> {
    return this.reconciler.reconcile();
  }
}
