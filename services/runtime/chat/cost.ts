/**
 * What a chat request costs the wallet (README: Chat, "Cost"), in integer base units of the ledger's
 * token (1 USD = 1_000_000):
 *
 *   BYOK (the wallet's own key):   platformCost = 0.10 × baseLlmCost + 500 × toolCalls
 *   internal (the operator's key): platformCost = 1.15 × baseLlmCost + 500 × toolCalls
 *
 * 500 base units = 0.0005 USD per tool call. The multipliers are exact fractions (10/100 and
 * 115/100): the sum is computed exactly and rounded up once, to a whole base unit, at the end:
 *
 *   platformCost = ceil((multiplierPercent × baseLlmCost + 100 × 500 × toolCalls) / 100)
 *
 * so a request that used anything costs at least 1 base unit and never less than its exact price.
 */

export type KeyKind = 'byok' | 'internal';

/** The LLM multiplier in percent: 10 % with the wallet's own key, 115 % on the operator's. */
export const LLM_MULTIPLIER_PERCENT: Record<KeyKind, bigint> = { byok: 10n, internal: 115n };

/** 0.0005 USD per tool call through the gateway. */
export const TOOL_CALL_PRICE = 500n;

export interface CostBreakdown {
  keyKind: KeyKind;
  /** baseLlmCost summed over the request's model turns (each turn already rounded up by baseLlmCost). */
  baseLlmCost: bigint;
  toolCalls: number;
  /** 10 or 115. */
  llmMultiplierPercent: bigint;
  /** 500 base units a tool call. */
  toolCallPrice: bigint;
  /** ceil(multiplierPercent × baseLlmCost / 100 + 500 × toolCalls): what the ledger is charged. */
  platformCost: bigint;
}

export function platformCost(keyKind: KeyKind, baseLlmCost: bigint, toolCalls: number): CostBreakdown {
  if (baseLlmCost < 0n) throw new RangeError('baseLlmCost must not be negative');
  if (!Number.isSafeInteger(toolCalls) || toolCalls < 0)
    throw new RangeError(`toolCalls must be a non-negative integer, got ${String(toolCalls)}`);
  const percent = LLM_MULTIPLIER_PERCENT[keyKind];
  const hundredths = percent * baseLlmCost + 100n * TOOL_CALL_PRICE * BigInt(toolCalls);
  return {
    keyKind,
    baseLlmCost,
    toolCalls,
    llmMultiplierPercent: percent,
    toolCallPrice: TOOL_CALL_PRICE,
    platformCost: (hundredths + 99n) / 100n,
  };
}

/** The breakdown as JSON (amounts as strings of digits, as every ledger amount). */
export const costView = (cost: CostBreakdown) => ({
  keyKind: cost.keyKind,
  baseLlmCost: cost.baseLlmCost.toString(),
  toolCalls: cost.toolCalls,
  llmMultiplierPercent: Number(cost.llmMultiplierPercent),
  toolCallPrice: cost.toolCallPrice.toString(),
  platformCost: cost.platformCost.toString(),
});
