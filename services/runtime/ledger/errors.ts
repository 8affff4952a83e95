import { SigilError } from '@sigil/plugin-api';
import { formatUsd } from './amounts.ts';
import type { BudgetWindow } from './windows.ts';

/**
 * Which limit refused a spend: an agent's budget window, the minimum balance new work needs (a chat,
 * a canvas run, a self-improvement run), or the wallet's available balance.
 */
export type SpendLimit = BudgetWindow | 'minimum_balance' | 'available';

export type RefusalReason = 'budget_exceeded' | 'minimum_balance' | 'insufficient_funds';

/** What a spend is for, named in its refusal (and its `details.purpose`): the work that was refused. */
export type SpendPurpose = 'chat' | 'canvas_run' | 'self_improvement';

const PURPOSES: Record<SpendPurpose, string> = {
  chat: 'a chat',
  canvas_run: 'a canvas run',
  self_improvement: 'a self-improvement run',
};

const REASONS: Record<SpendLimit, RefusalReason> = {
  daily: 'budget_exceeded',
  weekly: 'budget_exceeded',
  monthly: 'budget_exceeded',
  minimum_balance: 'minimum_balance',
  available: 'insufficient_funds',
};

export interface RefusalFacts {
  /** What the spend needed, in base units. */
  requested: bigint;
  /** What is left under the limit now (for a budget, limit − spent in the window; else available). */
  remaining: bigint;
  /** The limit itself: the budget, or the minimum balance. */
  limit?: bigint;
  /** When the window's spend stops counting; absent for balance limits, which wait for a deposit. */
  resetsAt?: Date;
  agentId?: string;
  /** The work refused; absent for a spend not made for one (a bare charge, a budget check). */
  purpose?: SpendPurpose;
}

/**
 * A spend the ledger refuses: HTTP 402 `payment_required`, with `details` saying which limit, what is
 * left and when it resets. The same value whether it comes from a charge or a budget check.
 */
export class SpendRefused extends SigilError {
  readonly limit: SpendLimit;
  readonly facts: RefusalFacts;

  constructor(limit: SpendLimit, facts: RefusalFacts) {
    super('payment_required', refusalMessage(limit, facts), {
      hint: refusalHint(limit, facts),
      details: {
        reason: REASONS[limit],
        limit,
        requested: facts.requested.toString(),
        remaining: facts.remaining.toString(),
        ...(facts.limit === undefined ? {} : { limitAmount: facts.limit.toString() }),
        ...(facts.resetsAt === undefined ? {} : { resetsAt: facts.resetsAt.toISOString() }),
        ...(facts.agentId === undefined ? {} : { agentId: facts.agentId }),
        ...(facts.purpose === undefined ? {} : { purpose: facts.purpose }),
      },
    });
    this.name = 'SpendRefused';
    this.limit = limit;
    this.facts = facts;
  }
}

function refusalMessage(limit: SpendLimit, facts: RefusalFacts): string {
  const usd = (amount: bigint) => `${amount} base units (${formatUsd(amount)} USD)`;
  const work = facts.purpose === undefined ? undefined : PURPOSES[facts.purpose];
  switch (limit) {
    case 'minimum_balance':
      return `Refused: ${work ?? 'spending'} needs an available balance of at least ${usd(facts.limit ?? 0n)}; available is ${usd(facts.remaining)}`;
    case 'available':
      return `Refused: ${work ?? 'this'} needs ${usd(facts.requested)} but only ${usd(facts.remaining)} is available`;
    default:
      return `Refused: the agent's ${limit} budget has ${usd(facts.remaining)} left of ${usd(facts.limit ?? 0n)}; ${work ?? 'this'} needs ${usd(facts.requested)}; it resets at ${facts.resetsAt?.toISOString()}`;
  }
}

function refusalHint(limit: SpendLimit, facts: RefusalFacts): string {
  if (limit === 'minimum_balance' || limit === 'available') {
    return 'Deposit to your deposit address (GET /wallet/deposit-address); deposits count once confirmed';
  }
  return `Wait until ${facts.resetsAt?.toISOString()}, or raise the budget with PUT /agents/${facts.agentId ?? ':id'}/budgets`;
}
