import type Anthropic from '@anthropic-ai/sdk';
import type {
  ContentBlockParam,
  MessageCreateParamsStreaming,
  MessageParam,
  StopReason,
} from '@anthropic-ai/sdk/resources/messages';
import {
  type LlmChatRequest,
  type LlmErrorKind,
  type LlmFinishReason,
  type LlmMessage,
  llmProviderError,
  LlmProviderError,
  type LlmStreamPart,
} from '@sigil/plugin-api';
import { estimatedUsage, guardedStream, parseToolInput } from '@sigil/plugin-api/llm';

const PROVIDER = 'anthropic';

export interface AnthropicOptions {
  baseURL: string;
  timeoutMs: number;
  maxRetries: number;
  /** `max_tokens` when the request sets no `maxOutputTokens` (the Messages API requires one). */
  defaultMaxTokens: number;
}

/**
 * The SDK, imported by the first request rather than with the provider, as the OpenAI-compatible
 * providers do theirs (issue 30, start-up). Kept once loaded: the error mapping below reads its classes.
 */
let sdk: typeof Anthropic | undefined;

/** One SDK client per request: the request's key is its only credential, and nothing outlives the call. */
async function clientFor(options: AnthropicOptions, apiKey: string): Promise<Anthropic> {
  sdk ??= (await import('@anthropic-ai/sdk')).default;
  return new sdk({
    apiKey,
    baseURL: options.baseURL,
    webhookKey: null,
    timeout: options.timeoutMs,
    maxRetries: options.maxRetries,
    // The SDK's debug log would print request headers: never, whatever ANTHROPIC_LOG says.
    logLevel: 'off',
    openTelemetry: false,
  });
}

/**
 * The conversation in the Messages API's shape: system messages joined into `system`; each tool
 * result a `tool_result` block in the user message after the assistant's `tool_use` blocks (text the
 * user adds after results goes in the same message, after them, as the API asks).
 */
export function toAnthropicMessages(messages: readonly LlmMessage[]): {
  system?: string;
  messages: MessageParam[];
} {
  const system: string[] = [];
  const out: MessageParam[] = [];
  const userBlocks = (): ContentBlockParam[] => {
    const last = out.at(-1);
    if (last?.role === 'user' && Array.isArray(last.content)) return last.content as ContentBlockParam[];
    const blocks: ContentBlockParam[] = [];
    out.push({ role: 'user', content: blocks });
    return blocks;
  };
  for (const message of messages) {
    switch (message.role) {
      case 'system':
        system.push(message.content);
        break;
      case 'user':
        if (message.content !== '') userBlocks().push({ type: 'text', text: message.content });
        break;
      case 'tool':
        userBlocks().push({
          type: 'tool_result',
          tool_use_id: message.toolCallId,
          content: message.content,
          ...(message.isError ? { is_error: true } : {}),
        });
        break;
      case 'assistant': {
        const blocks: ContentBlockParam[] = [];
        if (message.content !== '') blocks.push({ type: 'text', text: message.content });
        for (const call of message.toolCalls ?? [])
          blocks.push({ type: 'tool_use', id: call.id, name: call.name, input: call.input });
        if (blocks.length > 0) out.push({ role: 'assistant', content: blocks });
        break;
      }
    }
  }
  return { ...(system.length > 0 ? { system: system.join('\n\n') } : {}), messages: out };
}

const FINISH: Partial<Record<StopReason, LlmFinishReason>> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  pause_turn: 'stop',
  tool_use: 'tool-calls',
  max_tokens: 'length',
  model_context_window_exceeded: 'length',
  refusal: 'error',
};

/** Kinds of the API's error types, for errors that come inside a stream (no HTTP status then). */
const KIND_OF_TYPE: Record<string, LlmErrorKind> = {
  authentication_error: 'auth',
  permission_error: 'auth',
  rate_limit_error: 'rate_limit',
  invalid_request_error: 'bad_request',
  not_found_error: 'bad_request',
  request_too_large: 'bad_request',
};

export function anthropicError(apiKey: string, err: unknown): LlmProviderError {
  if (sdk !== undefined && err instanceof sdk.APIConnectionTimeoutError)
    return llmProviderError({
      provider: PROVIDER,
      apiKey,
      message: 'the request timed out',
      kind: 'upstream',
    });
  if (sdk !== undefined && err instanceof sdk.APIConnectionError)
    return llmProviderError({
      provider: PROVIDER,
      apiKey,
      message: 'cannot reach the server',
      kind: 'upstream',
    });
  if (sdk !== undefined && err instanceof sdk.APIError) {
    const type = typeof err.type === 'string' ? err.type : undefined;
    return llmProviderError({
      provider: PROVIDER,
      apiKey,
      status: err.status,
      message: err.apiMessage ?? err.message.replace(/^\d{3} /, ''),
      headers: err.headers,
      upstreamCode: type,
      ...(err.status === undefined ? { kind: (type && KIND_OF_TYPE[type]) || 'upstream' } : {}),
    });
  }
  const message = err instanceof Error ? err.message : String(err);
  return llmProviderError({
    provider: PROVIDER,
    apiKey,
    message: `the stream failed: ${message}`,
    kind: 'upstream',
  });
}

interface PendingToolUse {
  id: string;
  name: string;
  json: string;
  /** The input given with content_block_start, used when no input_json_delta came. */
  initial: unknown;
}

/** Streams one turn through the Messages API (see `LlmProviderV1.doStream`). */
export function streamAnthropicMessages(
  options: AnthropicOptions,
  request: LlmChatRequest,
): AsyncGenerator<LlmStreamPart, void, undefined> {
  return guardedStream(
    request,
    async function* (signal) {
      const body: MessageCreateParamsStreaming = {
        model: request.model,
        max_tokens: request.maxOutputTokens ?? options.defaultMaxTokens,
        ...toAnthropicMessages(request.messages),
        stream: true,
      };
      if (request.tools?.length)
        body.tools = request.tools.map((tool) => ({
          name: tool.name,
          description: tool.description,
          input_schema: { type: 'object', ...tool.inputSchema },
        }));

      const client = await clientFor(options, request.apiKey);
      const stream = await client.messages.create(body, { signal });
      const toolUses = new Map<number, PendingToolUse>();
      let inputTokens: number | undefined;
      let outputTokens: number | undefined;
      let finish: LlmFinishReason | undefined;
      let stopped = false;
      let output = '';
      const inputOf = (usage: {
        input_tokens: number | null;
        cache_creation_input_tokens: number | null;
        cache_read_input_tokens: number | null;
      }) =>
        usage.input_tokens === null
          ? inputTokens
          : usage.input_tokens +
            (usage.cache_creation_input_tokens ?? 0) +
            (usage.cache_read_input_tokens ?? 0);

      for await (const event of stream) {
        switch (event.type) {
          case 'message_start':
            inputTokens = inputOf(event.message.usage);
            outputTokens = event.message.usage.output_tokens;
            break;
          case 'content_block_start':
            if (event.content_block.type === 'tool_use')
              toolUses.set(event.index, {
                id: event.content_block.id,
                name: event.content_block.name,
                json: '',
                initial: event.content_block.input,
              });
            break;
          case 'content_block_delta':
            if (event.delta.type === 'text_delta' && event.delta.text !== '') {
              output += event.delta.text;
              yield { type: 'text-delta', text: event.delta.text };
            } else if (event.delta.type === 'input_json_delta') {
              const use = toolUses.get(event.index);
              if (use) use.json += event.delta.partial_json;
            }
            break;
          case 'content_block_stop': {
            const use = toolUses.get(event.index);
            if (!use) break;
            toolUses.delete(event.index);
            output += use.name + use.json;
            const input =
              use.json === '' &&
              typeof use.initial === 'object' &&
              use.initial !== null &&
              !Array.isArray(use.initial)
                ? (use.initial as Record<string, unknown>)
                : parseToolInput(PROVIDER, use.name, use.json);
            yield { type: 'tool-call', id: use.id, name: use.name, input };
            break;
          }
          case 'message_delta':
            if (event.delta.stop_reason) finish = FINISH[event.delta.stop_reason] ?? 'error';
            inputTokens = inputOf(event.usage);
            outputTokens = event.usage.output_tokens;
            break;
          case 'message_stop':
            stopped = true;
            break;
        }
      }
      if (!stopped && finish === undefined)
        throw new LlmProviderError('upstream', `${PROVIDER}: the stream ended before the model finished`);
      yield inputTokens === undefined || outputTokens === undefined
        ? estimatedUsage(request, output)
        : { type: 'usage', inputTokens, outputTokens };
      yield { type: 'finish', reason: finish ?? 'stop' };
    },
    (err) => anthropicError(request.apiKey, err),
  );
}
