import type { Balance } from './balance.ts';
import type { Budgets } from './budgets.ts';
import type { LedgerEntry } from './entries.ts';
import { BUDGET_WINDOWS } from './windows.ts';

/** JSON forms of ledger values: every amount a decimal string of base units, every time ISO 8601 UTC. */

export function balanceView(balance: Balance, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    wallet: balance.wallet,
    onChainBalance: balance.onChainBalance.toString(),
    unsettledSpend: balance.unsettledSpend.toString(),
    pendingWithdrawals: balance.pendingWithdrawals.toString(),
    heldSpend: balance.heldSpend.toString(),
    available: balance.available.toString(),
    settledSpend: balance.settledSpend.toString(),
    withdrawn: balance.withdrawn.toString(),
    balanceBlock: balance.balanceBlock.toString(),
    balanceUpdatedAt: balance.balanceUpdatedAt?.toISOString() ?? null,
    ...extra,
  };
}

export function budgetsView(agentId: string, budgets: Budgets): Record<string, unknown> {
  return {
    agentId,
    windows: 'calendar-utc',
    ...Object.fromEntries(
      BUDGET_WINDOWS.map((window) => {
        const state = budgets[window];
        return [
          window,
          {
            limit: state.limit?.toString() ?? null,
            spent: state.spent.toString(),
            held: state.held.toString(),
            remaining: state.remaining?.toString() ?? null,
            start: state.start.toISOString(),
            resetsAt: state.resetsAt.toISOString(),
          },
        ];
      }),
    ),
  };
}

export function entryView(entry: LedgerEntry): Record<string, unknown> {
  return {
    id: entry.id,
    kind: entry.kind,
    amount: entry.amount.toString(),
    agentId: entry.agentId ?? null,
    idempotencyKey: entry.kind === 'charge' ? entry.idempotencyKey : null,
    reference: entry.reference ?? null,
    createdAt: entry.createdAt.toISOString(),
  };
}
