import type { PaymentRailV1, PaymentResource, VerifiedPayment } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';
import type { Replica } from '../../../core/db/replicas.ts';
import type { Refusals } from './refusals.ts';
import type { SettlementRow } from './settlement-records.ts';

/**
 * Verifies a payment and reserves it: its `executing` record, its id unique in the database, so the
 * same authorization never runs twice, on any replica.
 */
export class Reservations {
  constructor(
    private readonly deps: {
      rail: PaymentRailV1;
      db: Database;
      clock: Clock;
      refusals: Refusals;
      /** This replica: the calls it runs name it, so that no other replica takes them for a dead process's. */
      replica: Replica;
      /** The longest a call may run: an authorization must stay valid at least this long. */
      staleAfterMs: number;
    },
  ) {}

  /**
   * Verifies `payload` for `resource` and reserves it. Throws 402 (and nothing is recorded) when the
   * payment is missing, invalid, or already used or in flight.
   *
   * A rail that can `peek` lets the reservation be written while the payment is verified (its commit
   * and the verification overlap); a payment that fails verification has its reservation dropped. A
   * payment's id is known to no one else until it is presented (x402 on EVM: the payer's random
   * EIP-3009 nonce), so a forged payment cannot hold a real one's place.
   *
   * The reservation's id is in `running` from its insert on (and taken out if it fails), so the stale
   * sweep never releases a record whose verification is still going; the caller removes it when the
   * call ends.
   */
  async reserve(
    payload: unknown,
    resource: PaymentResource,
    wallet: string | undefined,
    running: Set<string>,
  ): Promise<VerifiedPayment> {
    const { rail, refusals } = this.deps;
    if (payload === undefined) throw await refusals.paymentRequired(resource);
    const claimed = rail.peek?.(payload);
    // In `running` (the calls the stale sweep leaves alone) from the moment its record exists; an id
    // already there is another request's (a payment presented twice), and stays its own.
    const held = new Set<string>();
    const hold = (id: string) => {
      if (running.has(id)) return;
      running.add(id);
      held.add(id);
    };
    const letGo = (id: string) => {
      if (held.delete(id)) running.delete(id);
    };
    if (claimed) hold(claimed.id);
    const early = claimed ? this.insert(claimed, resource, wallet) : undefined;
    early?.catch(() => undefined); // awaited below, after the verification: its failure is reported there
    let payment: VerifiedPayment;
    try {
      payment = await this.verified(payload, resource);
    } catch (err) {
      await this.drop(early, claimed);
      if (claimed) letGo(claimed.id);
      throw err;
    }
    let reserved = claimed?.id === payment.id ? early : undefined;
    if (!reserved) {
      await this.drop(early, claimed);
      if (claimed) letGo(claimed.id);
      hold(payment.id);
      reserved = this.insert(payment, resource, wallet);
    }
    if (!(await reserved)) {
      letGo(payment.id);
      throw await refusals.paymentRequired(resource, {
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
      throw await this.deps.refusals.paymentRequired(resource, {
        code: outcome.reason,
        message: `Payment refused: ${outcome.message}`,
      });
    }
    await this.refuseShortWindow(outcome.payment, resource);
    return outcome.payment;
  }

  /** An authorization that lapses before the call could finish would run a tool it cannot pay for. */
  private async refuseShortWindow(payment: VerifiedPayment, resource: PaymentResource): Promise<void> {
    const { clock, staleAfterMs } = this.deps;
    if (payment.validBefore * 1000 >= clock.now().getTime() + staleAfterMs) return;
    throw await this.deps.refusals.paymentRequired(resource, {
      code: 'authorization_window_too_short',
      message: `Payment refused: the authorization must stay valid for at least ${Math.ceil(staleAfterMs / 1000)} s, the longest a call and its settlement may take`,
    });
  }

  /** Writes the `executing` record of a payment: true, or false when its id is already recorded. */
  private async insert(
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
      claimed_by: this.deps.replica.id,
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

  /**
   * Removes the reservation of a payment whose call did not finish (it awaits the client's input), as
   * if it had never been presented: the retry that finishes the call presents it again.
   */
  async withdraw(payment: VerifiedPayment): Promise<void> {
    await this.deps.db('payment_settlements').where({ id: payment.id, state: 'executing' }).delete();
  }

  /** Removes a reservation written for a payment that then failed: as if it had never been presented. */
  private async drop(
    reservation: Promise<boolean> | undefined,
    payment: VerifiedPayment | undefined,
  ): Promise<void> {
    if (!reservation || !payment || !(await reservation.catch(() => false))) return;
    await this.withdraw(payment);
  }
}
