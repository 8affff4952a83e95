import { Ajv } from 'ajv';
import { type LlmMessage, SigilError } from '@sigil/plugin-api';
import { baseLlmCost } from '@sigil/plugin-api/llm';
import type { SpendPurpose } from '../ledger/errors.ts';
import type { Holds, Settlement } from '../ledger/holds.ts';
import type { ProviderEntry } from './chat.ts';
import { type CostBreakdown, type KeyKind, platformCost } from './cost.ts';

/** One model turn outside a chat (a canvas node's), and who pays for it. */
export interface HeldTurnRequest {
  wallet: string;
  /** The agent whose budget windows the charge counts in. */
  agentId: string;
  entry: ProviderEntry;
  apiKey: string;
  keyKind: KeyKind;
  messages: LlmMessage[];
  maxOutputTokens: number;
  /** The hold's key: the same key holds and charges once, however often the turn is retried. */
  idempotencyKey: string;
  /** The work the turn is for, named when the ledger refuses its hold. */
  purpose: SpendPurpose;
  signal?: AbortSignal;
  /** Told of the settlement as soon as it is made, also when the turn failed half-way. */
  onSettled?: (cost: CostBreakdown, settlement: Settlement) => Promise<void>;
}

export interface HeldTurnResult extends StreamedTurn {
  cost: CostBreakdown;
  settlement: Settlement;
}

/** What a turn may cost upstream at most (ChatService.turnCost for the turn's model). */
export type TurnEstimate = (messages: LlmMessage[]) => bigint;

/**
 * A model turn held on the ledger before it starts (the budget check: a refused hold throws and
 * nothing is called) and charged after by the chat's formula, also when it fails half-way.
 */
export async function heldModelTurn(
  holds: Holds,
  estimate: TurnEstimate,
  request: HeldTurnRequest,
): Promise<HeldTurnResult> {
  const { wallet, agentId, keyKind, messages } = request;
  const hold = await holds.hold({
    wallet,
    agentId,
    amount: platformCost(keyKind, estimate(messages), 0).platformCost,
    idempotencyKey: request.idempotencyKey,
    purpose: request.purpose,
  });
  const progress: StreamedTurn = { text: '', inputTokens: 0, outputTokens: 0, baseLlmCost: 0n };
  let settled: { cost: CostBreakdown; settlement: Settlement };
  try {
    await streamTurn(request, progress);
  } finally {
    const cost = platformCost(keyKind, progress.baseLlmCost, 0);
    settled = { cost, settlement: await holds.settle(hold, cost.platformCost) };
    await request.onSettled?.(settled.cost, settled.settlement);
  }
  return { ...progress, ...settled };
}

/** What a turn has streamed so far: complete once streamTurn resolves. */
export interface StreamedTurn {
  text: string;
  inputTokens: number;
  outputTokens: number;
  baseLlmCost: bigint;
}

/**
 * Streams one model turn into `progress` (updated as it goes, so a turn that fails half-way still
 * says what it used). No hold, no charge: the caller holds and charges (or measures) it; `onPart`
 * is awaited before each part is taken (to keep the caller's hold alive during a long stream).
 */
export async function streamTurn(
  request: Omit<HeldTurnRequest, 'wallet' | 'agentId' | 'keyKind' | 'idempotencyKey' | 'purpose'>,
  progress: StreamedTurn,
  onPart?: () => Promise<void>,
): Promise<StreamedTurn> {
  const { entry } = request;
  for await (const part of entry.provider.doStream({
    model: entry.model.id,
    messages: request.messages,
    maxOutputTokens: request.maxOutputTokens,
    apiKey: request.apiKey,
    ...(request.signal ? { signal: request.signal } : {}),
  })) {
    await onPart?.();
    if (part.type === 'text-delta') progress.text += part.text;
    if (part.type === 'usage') {
      progress.baseLlmCost += baseLlmCost(part, entry.model);
      progress.inputTokens += part.inputTokens;
      progress.outputTokens += part.outputTokens;
    }
  }
  return progress;
}

/** The system text that asks a model for JSON valid against `schema`. */
export const schemaInstruction = (schema: Record<string, unknown>): string =>
  `Answer with one JSON value only, no prose, valid against this JSON Schema:\n${JSON.stringify(schema)}`;

const ajv = new Ajv({ strict: false, allErrors: false });

/** A model's answer as JSON valid against the schema (a fenced block accepted); a clear failure otherwise. */
export function structuredAnswer(text: string, schema: Record<string, unknown>): unknown {
  const body = /```(?:json)?\s*([\s\S]*?)```/.exec(text)?.[1] ?? text;
  let value: unknown;
  try {
    value = JSON.parse(body.trim());
  } catch {
    throw new SigilError('unavailable', 'The model did not answer with JSON', {
      details: { reason: 'llm_output_invalid' },
    });
  }
  const validate = ajv.compile(schema);
  if (!validate(value))
    throw new SigilError(
      'unavailable',
      `The model's JSON does not match the schema: ${ajv.errorsText(validate.errors)}`,
      { details: { reason: 'llm_output_invalid' } },
    );
  return value;
}
