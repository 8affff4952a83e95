import { randomUUID } from 'node:crypto';
import type OpenAI from 'openai';
import type {
  ChatCompletionCreateParamsStreaming,
  ChatCompletionMessageParam,
  ChatCompletionTool,
} from 'openai/resources/chat/completions';
import {
  type LlmChatRequest,
  type LlmFinishReason,
  type LlmMessage,
  llmProviderError,
  LlmProviderError,
  type LlmStreamPart,
  type LlmUsagePart,
} from '../index.ts';
import { estimatedUsage, guardedStream, parseToolInput } from './stream.ts';

/**
 * `@sigil/plugin-api/llm/openai`: an `llm-provider` stream over the OpenAI Chat Completions wire
 * format, with the official `openai` SDK (a peer dependency of this subpath only), for any server that
 * speaks it: OpenAI, and the many compatible ones. Sigil's openai-compatible and local providers
 * stream through it.
 */

export interface OpenAiChatOptions {
  /** Named in error messages, e.g. `openai-compatible`. */
  provider: string;
  /** Up to the version prefix, e.g. `https://api.openai.com/v1`. */
  baseURL: string;
  /** Longest wait for the upstream's response headers; the stream itself is not cut. */
  timeoutMs: number;
  /** SDK retries of a failed request before any part came (429, 5xx, connection errors). */
  maxRetries: number;
  /** How the request's `maxOutputTokens` is sent: `max_tokens` (widest support) or OpenAI's newer name. */
  maxTokensParameter: 'max_tokens' | 'max_completion_tokens';
}

/**
 * The SDK, imported by the first request rather than with the provider: 154 modules, ~120 ms of every
 * start of a runtime with an OpenAI-compatible provider (issue 30). Kept once loaded: the error
 * mapping below reads its classes.
 */
let sdk: typeof OpenAI | undefined;

/** One SDK client per request: the request's key is its only credential, and nothing outlives the call. */
async function clientFor(options: OpenAiChatOptions, apiKey: string): Promise<OpenAI> {
  sdk ??= (await import('openai')).default;
  return new sdk({
    apiKey,
    baseURL: options.baseURL,
    // Explicit nulls keep the operator's OPENAI_* environment out of a wallet's requests.
    adminAPIKey: null,
    organization: null,
    project: null,
    webhookSecret: null,
    timeout: options.timeoutMs,
    maxRetries: options.maxRetries,
    // The SDK's debug log would print request headers: never, whatever OPENAI_LOG says.
    logLevel: 'off',
  });
}

export function toOpenAiMessages(messages: readonly LlmMessage[]): ChatCompletionMessageParam[] {
  return messages.map((message): ChatCompletionMessageParam => {
    switch (message.role) {
      case 'system':
      case 'user':
        return { role: message.role, content: message.content };
      case 'assistant': {
        const calls = message.toolCalls ?? [];
        if (calls.length === 0) return { role: 'assistant', content: message.content };
        return {
          role: 'assistant',
          content: message.content === '' ? null : message.content,
          tool_calls: calls.map((call) => ({
            id: call.id,
            type: 'function' as const,
            function: { name: call.name, arguments: JSON.stringify(call.input) },
          })),
        };
      }
      case 'tool':
        return { role: 'tool', tool_call_id: message.toolCallId, content: message.content };
    }
  });
}

const toOpenAiTools = (request: LlmChatRequest): ChatCompletionTool[] | undefined =>
  request.tools?.length
    ? request.tools.map((tool) => ({
        type: 'function' as const,
        function: { name: tool.name, description: tool.description, parameters: tool.inputSchema },
      }))
    : undefined;

const FINISH: Record<string, LlmFinishReason> = {
  stop: 'stop',
  tool_calls: 'tool-calls',
  function_call: 'tool-calls',
  length: 'length',
};

/** An SDK failure as the contract's typed error, the key removed from what the upstream said. */
export function openAiError(provider: string, apiKey: string, err: unknown): LlmProviderError {
  // Before the SDK is loaded, none of its errors can have been thrown.
  if (sdk !== undefined && err instanceof sdk.APIConnectionTimeoutError)
    return llmProviderError({ provider, apiKey, message: 'the request timed out', kind: 'upstream' });
  if (sdk !== undefined && err instanceof sdk.APIConnectionError)
    return llmProviderError({ provider, apiKey, message: 'cannot reach the server', kind: 'upstream' });
  if (sdk !== undefined && err instanceof sdk.APIError) {
    const code =
      typeof err.code === 'string' ? err.code : typeof err.type === 'string' ? err.type : undefined;
    // The SDK's message starts with the status; ours says it once.
    const message = err.message.replace(/^\d{3} /, '');
    return llmProviderError({
      provider,
      apiKey,
      status: err.status,
      message,
      headers: err.headers,
      upstreamCode: code,
    });
  }
  const message = err instanceof Error ? err.message : String(err);
  return llmProviderError({ provider, apiKey, message: `the stream failed: ${message}`, kind: 'upstream' });
}

interface PendingCall {
  id: string;
  name: string;
  arguments: string;
}

/** Streams one turn through the Chat Completions API (see `LlmProviderV1.doStream`). */
export function streamOpenAiChat(
  options: OpenAiChatOptions,
  request: LlmChatRequest,
): AsyncGenerator<LlmStreamPart, void, undefined> {
  const { provider } = options;
  return guardedStream(
    request,
    async function* (signal) {
      const body: ChatCompletionCreateParamsStreaming = {
        model: request.model,
        messages: toOpenAiMessages(request.messages),
        stream: true,
        stream_options: { include_usage: true },
      };
      const tools = toOpenAiTools(request);
      if (tools) body.tools = tools;
      if (request.maxOutputTokens !== undefined) body[options.maxTokensParameter] = request.maxOutputTokens;

      const client = await clientFor(options, request.apiKey);
      const stream = await client.chat.completions.create(body, { signal });
      const calls = new Map<number, PendingCall>();
      let output = '';
      let finish: LlmFinishReason | undefined;
      let usage: LlmUsagePart | undefined;
      for await (const chunk of stream) {
        if (chunk.usage) {
          usage = {
            type: 'usage',
            inputTokens: chunk.usage.prompt_tokens,
            outputTokens: chunk.usage.completion_tokens,
          };
        }
        const choice = chunk.choices[0];
        if (!choice) continue;
        const text = choice.delta?.content;
        if (text) {
          output += text;
          yield { type: 'text-delta', text };
        }
        for (const delta of choice.delta?.tool_calls ?? []) {
          const call = calls.get(delta.index) ?? { id: '', name: '', arguments: '' };
          if (delta.id) call.id = delta.id;
          if (delta.function?.name) call.name += delta.function.name;
          if (delta.function?.arguments) call.arguments += delta.function.arguments;
          calls.set(delta.index, call);
        }
        if (choice.finish_reason && finish === undefined) {
          finish = FINISH[choice.finish_reason] ?? 'error';
          for (const [, call] of [...calls].sort(([a], [b]) => a - b)) {
            output += call.name + call.arguments;
            yield {
              type: 'tool-call',
              id: call.id || `call_${randomUUID().replaceAll('-', '')}`,
              name: call.name,
              input: parseToolInput(provider, call.name, call.arguments),
            };
          }
          calls.clear();
        }
      }
      if (finish === undefined)
        throw new LlmProviderError('upstream', `${provider}: the stream ended before the model finished`);
      yield usage ?? estimatedUsage(request, output);
      yield { type: 'finish', reason: finish };
    },
    (err) => openAiError(provider, request.apiKey, err),
  );
}
