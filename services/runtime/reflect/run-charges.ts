import { platformCost, type KeyKind } from '../chat/cost.ts';
import { SpendRefused } from '../ledger/errors.ts';
import type { Hold, Holds } from '../ledger/holds.ts';
import type { ReflectJob } from './pipeline.ts';

/** One agent's part of a run: its hold, and the upstream cost (baseLlmCost) of its calls so far by key. */
interface AgentPart {
  hold: Hold | undefined;
  base: Map<KeyKind, bigint>;
}

/**
 * How many more calls like the next one an extension makes room for beyond it, so that the next calls
 * find their room already held (an extension is a transaction under the wallet's lock; a call's
 * estimate is its worst case, far above what it uses). A refused roomy extension is tried again for
 * exactly what the call needs: the room never refuses a call.
 */
const ROOM_CALLS = 1n;

/**
 * What a self-improvement run spends, on the ledger: one hold per agent whose sessions it reads
 * (budgets are an agent's), under `reflect:<runId>:<attempt>:<agentId>`, charged once when the run
 * ends.
 *
 * - Before each model call (`reserve`), the budget check: the agent's hold must cover the agent's
 *   cost so far and the call's worst case; when it does not it is taken or extended (refused:
 *   SpendRefused, `payment_required`, and the call is not made), else its expiry is kept.
 * - After each call (`spent`), also one that failed half-way, what it used is added to the agent's
 *   cost and recorded on the hold (Holds.recordCostSoFar): if the process dies, the expiry sweep
 *   charges that cost once the hold expires.
 * - When the run ends, however it ends (`settle`): each hold is settled to its agent's cost
 *   (Holds.settleOrRecord), and `charged` is the sum of the settlements.
 *
 * A resumed run (its next attempt) holds under new keys: the dead attempt's recorded cost is charged
 * by the sweep, the new attempt's calls by its own settlements.
 */
export class RunCharges {
  /** The sum of the settlements, once `settle` ran. */
  charged = 0n;
  private readonly parts = new Map<string, AgentPart>();

  constructor(
    private readonly holds: Holds,
    private readonly job: Pick<ReflectJob, 'wallet' | 'runId' | 'attempt'>,
  ) {}

  /** The ledger key of the agent's hold, and of its charge (`charge:` + it). */
  key(agentId: string): string {
    return `reflect:${this.job.runId}:${this.job.attempt}:${agentId}`;
  }

  /** Before a call of `agentId`'s that may cost `estimate` upstream at most (see the class). */
  async reserve(agentId: string, keyKind: KeyKind, estimate: bigint): Promise<void> {
    const part = this.part(agentId);
    // A hold is at least 1: an estimate of nothing still holds (and checks) the smallest amount.
    const needed = costOf(part.base, keyKind, estimate) || 1n;
    const { hold } = part;
    if (hold && needed <= hold.amount) {
      part.hold = await this.holds.keep(hold);
      return;
    }
    const roomy = costOf(part.base, keyKind, estimate * (1n + ROOM_CALLS));
    const take = (amount: bigint) =>
      hold
        ? this.holds.extend(hold, amount)
        : this.holds.hold({
            wallet: this.job.wallet,
            agentId,
            amount,
            idempotencyKey: this.key(agentId),
            purpose: 'self_improvement',
          });
    part.hold = await take(roomy).catch((err: unknown) => {
      if (err instanceof SpendRefused && roomy > needed) return take(needed);
      throw err;
    });
  }

  /** While a call streams: keeps the agent's hold from expiring (Holds.keep). */
  async keep(agentId: string): Promise<void> {
    const part = this.part(agentId);
    if (part.hold) part.hold = await this.holds.keep(part.hold);
  }

  /** After a call of `agentId`'s (also one that failed half-way): what it used upstream (see the class). */
  async spent(agentId: string, keyKind: KeyKind, base: bigint): Promise<void> {
    const part = this.part(agentId);
    part.base.set(keyKind, (part.base.get(keyKind) ?? 0n) + base);
    const { hold } = part;
    if (!hold || base === 0n) return;
    // A hold the sweep ended while the run stalled past its TTL is taken again (refused when the
    // sweep charged the cost recorded before: the run then ends).
    part.hold = await this.holds.recordSpent(hold, costOf(part.base));
  }

  /**
   * Settles every hold to its agent's cost; never throws (a settlement that keeps failing is left on
   * its hold for the expiry sweep, and logged by Holds). Sets and answers `charged`.
   */
  async settle(): Promise<bigint> {
    for (const [agentId, part] of this.parts) {
      if (!part.hold) continue;
      const settled = await this.holds.settleOrRecord(part.hold, costOf(part.base), {
        runId: this.job.runId,
        attempt: this.job.attempt,
        agentId,
      });
      part.hold = undefined;
      if ('settlement' in settled) this.charged += settled.settlement.charged;
    }
    return this.charged;
  }

  private part(agentId: string): AgentPart {
    let part = this.parts.get(agentId);
    if (!part) this.parts.set(agentId, (part = { hold: undefined, base: new Map() }));
    return part;
  }
}

/** The platform's charge for `base` (plus `extra` under `keyKind`): the chat's formula, once a key kind. */
function costOf(base: ReadonlyMap<KeyKind, bigint>, keyKind?: KeyKind, extra = 0n): bigint {
  const all = new Map(base);
  if (keyKind) all.set(keyKind, (all.get(keyKind) ?? 0n) + extra);
  let cost = 0n;
  for (const [kind, amount] of all) cost += platformCost(kind, amount, 0).platformCost;
  return cost;
}
