import type { Knex } from 'knex';
import type { Address } from 'viem';
import { checksumAddress } from '../../../core/chain/address.ts';
import { SigilError } from '@sigil/plugin-api';
import { formatUsd, toAmount } from './amounts.ts';
import { utcDay } from './windows.ts';

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

/** A withdrawal's amount within `minAmount` and `maxAmount`, else 400 naming the limit. */
export function checkWithdrawalAmount(amount: bigint, limits: WithdrawalLimits): void {
  if (amount >= limits.minAmount && amount <= limits.maxAmount) return;
  const limit = amount < limits.minAmount ? 'minAmount' : 'maxAmount';
  throw new SigilError(
    'invalid_request',
    `A withdrawal is between ${limits.minAmount} and ${limits.maxAmount} base units (${formatUsd(limits.minAmount)} to ${formatUsd(limits.maxAmount)} USD)`,
    {
      details: { limit, minAmount: limits.minAmount.toString(), maxAmount: limits.maxAmount.toString() },
    },
  );
}

/**
 * A withdrawal destination: an EIP-55 checksummed address (a typo then fails the checksum instead of
 * sending money nowhere), not the zero address, not the token contract, not one of the service's own
 * addresses (treasury, operator) and not a deposit address of any wallet.
 */
export async function checkDestination(to: string, forbidden: ForbiddenDestinations): Promise<Address> {
  const refuse = (message: string, hint?: string): never => {
    throw new SigilError('invalid_request', `Invalid body.to: ${message}`, {
      ...(hint === undefined ? {} : { hint }),
      details: { issues: [{ path: 'body.to', message }] },
    });
  };
  if (!/^0x[0-9a-fA-F]{40}$/.test(to)) refuse('must be a 0x-prefixed 20-byte hex address');
  const checksummed = checksumAddress(to);
  if (checksummed !== to) {
    refuse(
      'must be written with its EIP-55 checksum (mixed case)',
      'Copy the address from your wallet, which shows it checksummed; an all-lower-case address carries no checksum',
    );
  }
  const same = (other: Address | undefined) =>
    other !== undefined && other.toLowerCase() === to.toLowerCase();
  if (BigInt(checksummed) === 0n) refuse('is the zero address: tokens sent there are lost');
  if (same(forbidden.token)) refuse('is the token contract itself: tokens sent there are lost');
  if (same(forbidden.treasury) || same(forbidden.operator)) refuse("is one of this service's own addresses");
  if (await forbidden.isDepositAddress(checksummed)) {
    refuse('is a deposit address of this service', 'Withdraw to a wallet you control');
  }
  return checksummed;
}

/**
 * Within the wallet's lock (`trx`): at most `maxPerHour` requests in any hour and `dailyTotal` per UTC
 * day (failed withdrawals not counted) with `amount`, else 429 saying when the next is possible.
 */
export async function refuseOverWithdrawalRate(
  trx: Knex.Transaction,
  input: { wallet: string; amount: bigint; limits: WithdrawalLimits; now: Date },
): Promise<void> {
  const { wallet, limits } = input;
  const now = input.now.getTime();
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
  const day = utcDay(input.now);
  const today = (await trx('ledger_transfers')
    .where({ wallet, kind: 'withdrawal' })
    .whereNot({ state: 'failed' })
    .andWhere('created_at', '>=', day.start.getTime())
    .first(trx.raw('cast(coalesce(sum(amount), 0) as text) as total'))) as { total: string };
  const withdrawnToday = toAmount(today.total);
  if (withdrawnToday + input.amount <= limits.dailyTotal) return;
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
