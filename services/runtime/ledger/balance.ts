import { toAmount } from './amounts.ts';

/** A wallet's money as `ledger_wallets` keeps it: its cached on-chain balance and running totals. */

/**
 * What an entry does to a wallet's running totals. `deposit` entries record incoming transfers for the
 * history only: the on-chain balance is read from the chain, never summed from entries.
 */
export const ENTRY_EFFECTS = {
  charge: { unsettled_spend: 1 },
  settlement: { unsettled_spend: -1, settled_spend: 1 },
  withdrawal_hold: { pending_withdrawals: 1 },
  withdrawal_release: { pending_withdrawals: -1 },
  withdrawal_complete: { pending_withdrawals: -1, withdrawn: 1 },
  deposit: {},
  /**
   * The chain the deposits were on was replaced (a dev chain started afresh): the spend charged there
   * can never be swept from it, so it is written off, and the new chain's balance starts clean.
   */
  chain_replaced: { unsettled_spend: -1 },
} as const satisfies Record<string, Partial<Record<TotalColumn, 1 | -1>>>;

export type EntryKind = keyof typeof ENTRY_EFFECTS;
export const ENTRY_KINDS = Object.keys(ENTRY_EFFECTS) as EntryKind[];

/** The running totals that entries change (held spend is changed by holds: holds.ts). */
export const TOTAL_COLUMNS = [
  'unsettled_spend',
  'settled_spend',
  'pending_withdrawals',
  'withdrawn',
] as const;
export type TotalColumn = (typeof TOTAL_COLUMNS)[number];

/**
 * A wallet's ledger, in base units.
 * `available = onChainBalance − unsettledSpend − pendingWithdrawals − heldSpend`, or 0 when that is
 * below 0: the balance read from the chain can trail what the ledger already counts as gone (a sweep
 * mined before the worker marks it done), and what cannot be spent is 0, not a debt.
 */
export interface Balance {
  wallet: string;
  /** The token balance of the wallet's deposit address at `balanceBlock`, a block with enough confirmations. */
  onChainBalance: bigint;
  /** Charged but not yet swept to the treasury. */
  unsettledSpend: bigint;
  /** Requested withdrawals whose transfer has not completed or failed. */
  pendingWithdrawals: bigint;
  /** Reserved by requests still running (a chat's estimate), until they settle or release (holds.ts). */
  heldSpend: bigint;
  available: bigint;
  /** How far the spend, withdrawals and holds exceed the on-chain balance when they do (else 0). */
  shortfall: bigint;
  /** Charged and swept to the treasury (no longer at the deposit address). */
  settledSpend: bigint;
  /** Withdrawals completed on chain. */
  withdrawn: bigint;
  balanceBlock: bigint;
  /** When the on-chain balance was last read; undefined before the first read. */
  balanceUpdatedAt: Date | undefined;
}

export interface WalletRow {
  wallet: string;
  on_chain_balance: string;
  balance_block: string;
  balance_updated_at: string;
  unsettled_spend: string;
  settled_spend: string;
  pending_withdrawals: string;
  withdrawn: string;
  held_spend: string;
}

export const WALLET_MONEY = [
  'on_chain_balance',
  'balance_block',
  'balance_updated_at',
  ...TOTAL_COLUMNS,
  'held_spend',
] as const;

export function balanceOf(wallet: string, row: WalletRow | undefined): Balance {
  const onChainBalance = toAmount(row?.on_chain_balance ?? '0');
  const unsettledSpend = toAmount(row?.unsettled_spend ?? '0');
  const pendingWithdrawals = toAmount(row?.pending_withdrawals ?? '0');
  const heldSpend = toAmount(row?.held_spend ?? '0');
  const updatedAt = toAmount(row?.balance_updated_at ?? '0');
  const spendable = onChainBalance - unsettledSpend - pendingWithdrawals - heldSpend;
  return {
    wallet,
    onChainBalance,
    unsettledSpend,
    pendingWithdrawals,
    heldSpend,
    available: spendable > 0n ? spendable : 0n,
    shortfall: spendable < 0n ? -spendable : 0n,
    settledSpend: toAmount(row?.settled_spend ?? '0'),
    withdrawn: toAmount(row?.withdrawn ?? '0'),
    balanceBlock: toAmount(row?.balance_block ?? '0'),
    balanceUpdatedAt: updatedAt === 0n ? undefined : new Date(Number(updatedAt)),
  };
}
