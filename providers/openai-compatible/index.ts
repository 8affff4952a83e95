import { z } from 'zod';
import { connectionOptions, modelCatalogOption } from '@sigil/plugin-api/llm';
import { streamOpenAiChat } from '@sigil/plugin-api/llm/openai';
import { definePlugin } from '@sigil/plugin-api';
import { OPENAI_MODELS } from './catalog.ts';

/**
 * OpenAI's Chat Completions API, or any server that speaks it (`baseURL`), through the official
 * `openai` SDK: streaming, tools as functions, usage from `stream_options.include_usage`. Each request
 * carries the wallet's own key, used for that request only.
 */
export default definePlugin({
  kind: 'llm-provider',
  name: 'provider-openai-compatible',
  specVersion: 'v1',
  description: 'OpenAI Chat Completions, or a compatible server at baseURL, with the wallet’s own key',
  config: z
    .object({
      ...connectionOptions('https://api.openai.com/v1'),
      models: modelCatalogOption(OPENAI_MODELS).describe(
        'Models served, with prices in base units per million tokens; replaces the default OpenAI catalog',
      ),
      maxTokensParameter: z
        .enum(['max_tokens', 'max_completion_tokens'])
        .default('max_tokens')
        .describe('Request field for the output cap: max_tokens (most servers) or max_completion_tokens'),
    })
    .strict(),
  create: ({ config }) => {
    const options = {
      provider: 'openai-compatible',
      baseURL: config.baseURL,
      timeoutMs: config.timeoutMs,
      maxRetries: config.maxRetries,
      maxTokensParameter: config.maxTokensParameter,
    };
    return {
      specVersion: 'v1' as const,
      keySlot: 'OPENAI_API_KEY',
      listModels: () => Promise.resolve(config.models.map((model) => ({ ...model }))),
      doStream: (request) => streamOpenAiChat(options, request),
    };
  },
});
