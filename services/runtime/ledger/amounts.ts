import type { Knex } from 'knex';
import { z } from 'zod';
import { SigilError } from '@sigil/plugin-api';

/**
 * Money in the ledger: integer base units of a 6-decimal dollar token (1 USD = 1 000 000 units), as
 * bigint in code, as bigint columns in the database, and as decimal strings in JSON. Never a float.
 */
export const TOKEN_DECIMALS = 6;

/** The largest amount one request may name: one billion dollars. Sums stay far inside int8. */
export const MAX_AMOUNT = 10n ** 15n;

/**
 * An amount in a request body: a decimal string of base units ("1500000" is 1.5 USD), or a JSON integer
 * no larger than 2^53 − 1. Fractions, exponents, signs and hex are refused.
 */
export function amountSchema(options: { allowZero?: boolean } = {}) {
  const min = options.allowZero ? 0n : 1n;
  return z
    .union([
      z.string().regex(/^(0|[1-9][0-9]{0,15})$/, 'must be an integer amount in base units, as digits'),
      z.number().int('must be an integer amount in base units').min(0).max(Number.MAX_SAFE_INTEGER),
    ])
    .transform((value) => BigInt(value))
    .refine((value) => value >= min, options.allowZero ? 'must not be negative' : 'must be more than 0')
    .refine((value) => value <= MAX_AMOUNT, `must be at most ${MAX_AMOUNT} base units`);
}

/** A bigint column as read: PostgreSQL gives int8 as a string, SQLite as a number (exact below 2^53). */
export function toAmount(value: unknown): bigint {
  if (typeof value === 'bigint') return value;
  if (typeof value === 'string' && /^-?[0-9]+$/.test(value)) return BigInt(value);
  if (typeof value === 'number' && Number.isSafeInteger(value)) return BigInt(value);
  if (value === null || value === undefined) return 0n;
  throw new SigilError('internal', `not an integer amount: ${String(value)}`, {
    details: { reason: 'corrupt_amount' },
  });
}

/** Selects a bigint column as text, so no driver turns it into a float on the way out. */
export const asText = (db: Knex, column: string, alias = column.split('.').pop() as string): Knex.Raw =>
  db.raw('cast(?? as text) as ??', [column, alias]);

/** `column + amount` in SQL, the amount bound as text and cast, so it never passes through a float. */
export const plus = (db: Knex, column: string, amount: bigint): Knex.Raw =>
  db.raw('?? + cast(? as bigint)', [column, amount.toString()]);

/** `column - amount`, likewise. */
export const minus = (db: Knex, column: string, amount: bigint): Knex.Raw =>
  db.raw('?? - cast(? as bigint)', [column, amount.toString()]);

/** "1.5" for 1500000: for messages only; every API field carries base units. */
export function formatUsd(amount: bigint): string {
  const negative = amount < 0n;
  const abs = negative ? -amount : amount;
  const unit = 10n ** BigInt(TOKEN_DECIMALS);
  const fraction = (abs % unit).toString().padStart(TOKEN_DECIMALS, '0').replace(/0+$/, '');
  return `${negative ? '-' : ''}${abs / unit}${fraction === '' ? '' : `.${fraction}`}`;
}
