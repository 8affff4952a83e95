import type { LlmModelInfo } from '../index.ts';

/** Base units of the ledger's token per US dollar: it has 6 decimals, like USDC. */
export const BASE_UNITS_PER_USD = 1_000_000n;

const TOKENS_PER_PRICE_UNIT = 1_000_000n;

export interface LlmTokenUsage {
  inputTokens: number;
  outputTokens: number;
}

export type LlmPrices = Pick<LlmModelInfo, 'inputPricePerMTok' | 'outputPricePerMTok'>;

/**
 * What a turn cost upstream, in base units: the model's prices are per million tokens, so
 *
 *   baseLlmCost = ceil((inputTokens × inputPricePerMTok + outputTokens × outputPricePerMTok) / 1_000_000)
 *
 * computed exactly on integers and rounded up once, on the sum, to a whole base unit: a turn that
 * used any priced token costs at least 1 base unit, and never less than its exact price.
 * Throws a RangeError for token counts that are not non-negative safe integers or negative prices.
 */
export function baseLlmCost(usage: LlmTokenUsage, prices: LlmPrices): bigint {
  for (const [name, value] of Object.entries({
    inputTokens: usage.inputTokens,
    outputTokens: usage.outputTokens,
  }))
    if (!Number.isSafeInteger(value) || value < 0)
      throw new RangeError(`${name} must be a non-negative integer, got ${String(value)}`);
  if (prices.inputPricePerMTok < 0n || prices.outputPricePerMTok < 0n)
    throw new RangeError('prices must not be negative');
  const micro =
    BigInt(usage.inputTokens) * prices.inputPricePerMTok +
    BigInt(usage.outputTokens) * prices.outputPricePerMTok;
  return (micro + TOKENS_PER_PRICE_UNIT - 1n) / TOKENS_PER_PRICE_UNIT;
}

/** A price in base units as a dollar string with every digit kept, e.g. 150_000n → "0.15". */
export function formatUsd(baseUnits: bigint): string {
  const negative = baseUnits < 0n;
  const units = negative ? -baseUnits : baseUnits;
  const whole = units / BASE_UNITS_PER_USD;
  const fraction = (units % BASE_UNITS_PER_USD).toString().padStart(6, '0').replace(/0+$/, '');
  return `${negative ? '-' : ''}${whole}${fraction ? `.${fraction}` : ''}`;
}
