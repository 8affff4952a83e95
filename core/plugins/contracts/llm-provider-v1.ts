/**
 * `llm-provider` v1: a chat model reached with the caller's own key (BYOK) or the operator's.
 * The host calls `doStream`; users call the runtime's chat, never the plugin directly.
 */
export interface LlmProviderV1 {
  readonly specVersion: 'v1';
  /** Models this provider serves, with prices used for `baseLlmCost`. */
  listModels(): Promise<readonly LlmModelInfo[]>;
  /** Streams one model turn. Must stop promptly (and cancel upstream) when `signal` aborts. */
  doStream(request: LlmChatRequest): AsyncIterable<LlmStreamPart>;
}

export interface LlmModelInfo {
  id: string;
  /** Price per million input and output tokens, in the ledger token's base units (integers). */
  inputPricePerMTok: bigint;
  outputPricePerMTok: bigint;
}

export interface LlmMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  toolCallId?: string;
  toolCalls?: readonly LlmToolCall[];
}

export interface LlmToolDefinition {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
}

export interface LlmToolCall {
  id: string;
  name: string;
  /** Arguments as the model produced them (a JSON object). */
  input: Record<string, unknown>;
}

export interface LlmChatRequest {
  model: string;
  messages: readonly LlmMessage[];
  tools?: readonly LlmToolDefinition[];
  /** The key to use; decrypted from the wallet's vault for this call only. Never logged. */
  apiKey: string;
  signal?: AbortSignal;
}

export type LlmStreamPart =
  | { type: 'text-delta'; text: string }
  | { type: 'tool-call'; call: LlmToolCall }
  | { type: 'usage'; inputTokens: number; outputTokens: number }
  | { type: 'finish'; reason: 'stop' | 'tool-calls' | 'length' | 'error' };

/** Typed failures a provider must map its upstream errors to. */
export type LlmErrorKind = 'auth' | 'rate_limit' | 'bad_request' | 'upstream';
