/**
 * `llm-provider` v1: a chat model reached with the caller's own key (BYOK) or the operator's.
 * The host calls `doStream`; users call the runtime's chat, never the plugin directly.
 *
 * A conforming provider:
 * - lists the models it serves with integer prices (`listModels`), read from its configuration: no
 *   network, no key;
 * - streams one model turn per `doStream` call as {@link LlmStreamPart}s: text and tool calls as they
 *   come, then exactly one `usage` part and exactly one `finish` part, which is the last;
 * - uses the `apiKey` of each request for that request only: never stored, cached across requests,
 *   logged, or put in an error;
 * - throws an `LlmProviderError` (this package's `llmProviderError` builds one) for every upstream failure, typed by
 *   {@link LlmErrorKind}: a refused key is `auth`, HTTP 429 is `rate_limit`;
 * - cancels the upstream HTTP request promptly when `signal` aborts or when the caller stops
 *   iterating (`break`, `return()`).
 *
 * Types only: the errors are in this package (llm-errors.ts); helpers a provider may use (prices in
 * config, cost, streams that keep these promises) are in `@sigil/plugin-api/llm`, a client of the
 * OpenAI Chat Completions wire in `@sigil/plugin-api/llm/openai`.
 */
export interface LlmProviderV1 {
  /** The version of this contract the instance implements: its manifest's `specVersion`. */
  readonly specVersion: 'v1';
  /**
   * The vault slot a wallet stores its key for this provider under, named after the provider as its
   * own SDKs name the variable (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`), or `PROVIDER_API_KEY`, the
   * generic slot. The runtime names it in the hint when no key is stored.
   */
  readonly keySlot: string;
  /**
   * The models this provider serves, with the prices `baseLlmCost` (`@sigil/plugin-api/llm`) charges.
   * At least one; ids unique. Reads configuration only: it neither needs a key nor reaches the
   * upstream.
   */
  listModels(): Promise<readonly LlmModelInfo[]>;
  /**
   * Streams one model turn. The request goes upstream when iteration starts; the parts come as the
   * upstream produces them:
   * - any number of `text-delta` and `tool-call` parts (a tool call is yielded once, complete, with
   *   its input parsed to an object);
   * - then exactly one `usage` part, then exactly one `finish` part, which ends the stream.
   *
   * A failure, before or after the first part, ends the iteration by throwing an `LlmProviderError`
   * (then no `finish` part comes). When `signal` aborts, the upstream request is cancelled and the
   * iteration throws `signal.reason` at once, even while waiting for the upstream; ending the
   * iteration early (`break`, `return()`) cancels the upstream request as well.
   */
  doStream(request: LlmChatRequest): AsyncIterable<LlmStreamPart>;
}

/** Amounts are base units of the ledger's token, which has 6 decimals: 1 USD = 1_000_000n. */
export interface LlmModelInfo {
  /** The id requests name in `model`, exactly as the upstream knows it. */
  id: string;
  /** Price per million input tokens, in base units (integer). */
  inputPricePerMTok: bigint;
  /** Price per million output tokens, in base units (integer). */
  outputPricePerMTok: bigint;
}

/** One message of the conversation, oldest first. */
export type LlmMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string }
  /** A model turn: its text (may be empty) and the tools it called, in order. */
  | { role: 'assistant'; content: string; toolCalls?: readonly LlmToolCall[] }
  /**
   * The result of one tool call of the assistant message just before (all results of that message
   * follow it, one message each). `content` is what the tool returned, as text (e.g. JSON);
   * `isError` when the tool failed.
   */
  | { role: 'tool'; toolCallId: string; content: string; isError?: boolean };

export interface LlmToolDefinition {
  /** Letters, digits, `_` and `-`, at most 64 characters (what OpenAI and Anthropic both accept). */
  name: string;
  description: string;
  /** JSON Schema of the input, an object schema. */
  inputSchema: Record<string, unknown>;
}

export interface LlmToolCall {
  /** The upstream's id for this call; tool results answer it by `toolCallId`. */
  id: string;
  name: string;
  /** Arguments as the model produced them, parsed: always a JSON object. */
  input: Record<string, unknown>;
}

export interface LlmChatRequest {
  /** One of `listModels()`'s ids (the upstream refuses others: `bad_request`). */
  model: string;
  messages: readonly LlmMessage[];
  /** Tools the model may call; none when absent or empty. */
  tools?: readonly LlmToolDefinition[];
  /** Most output tokens for this turn; reaching it finishes with `length`. The provider's default when absent. */
  maxOutputTokens?: number;
  /** The key to use for this request only; decrypted from the wallet's vault for it. Never logged. */
  apiKey: string;
  /** Aborting it cancels the upstream request; the iteration then throws `signal.reason`. */
  signal?: AbortSignal;
}

export type LlmStreamPart =
  | { type: 'text-delta'; text: string }
  | ({ type: 'tool-call' } & LlmToolCall)
  | LlmUsagePart
  | { type: 'finish'; reason: LlmFinishReason };

/** Tokens of the whole turn, as the upstream counted them. */
export interface LlmUsagePart {
  type: 'usage';
  /** Non-negative integers. */
  inputTokens: number;
  outputTokens: number;
  /**
   * True when the upstream reported no usage and the provider estimated it (about 4 characters a
   * token, rounded up), so a turn is never charged as free because a server omitted its counts.
   */
  estimated?: boolean;
}

/**
 * `stop`: the model ended its answer; `tool-calls`: it waits for the results of the tool calls it
 * made; `length`: it reached `maxOutputTokens` (or the model's limit); `error`: the upstream ended the
 * turn for another reason (e.g. a content filter or a refusal).
 */
export type LlmFinishReason = 'stop' | 'tool-calls' | 'length' | 'error';

/**
 * Typed failures a provider maps its upstream errors to (`LlmProviderError.kind`):
 * - `auth`: the key was refused (HTTP 401, 403); not retryable;
 * - `rate_limit`: HTTP 429; retryable, after `retryAfterMs` when the upstream said;
 * - `bad_request`: the upstream refused the request itself (HTTP 400, 404, 413, 422: unknown model,
 *   invalid messages, too long); not retryable;
 * - `upstream`: anything else (5xx, unreachable, timed out, a broken stream); retryable.
 */
export type LlmErrorKind = 'auth' | 'rate_limit' | 'bad_request' | 'upstream';
