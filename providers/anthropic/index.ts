import { z } from 'zod';
import { connectionOptions, modelCatalogOption } from '@sigil/plugin-api/llm';
import { definePlugin } from '@sigil/plugin-api';
import { ANTHROPIC_MODELS } from './catalog.ts';
import { streamAnthropicMessages } from './messages.ts';

/**
 * Anthropic's Messages API through the official `@anthropic-ai/sdk`: streaming, tools (`tool_use`
 * blocks become tool calls with their input parsed), usage from `message_start` and `message_delta`.
 * Each request carries the wallet's own key, used for that request only.
 */
export default definePlugin({
  kind: 'llm-provider',
  name: 'provider-anthropic',
  specVersion: 'v1',
  description: 'Anthropic Messages API with the wallet’s own key',
  config: z
    .object({
      ...connectionOptions('https://api.anthropic.com'),
      models: modelCatalogOption(ANTHROPIC_MODELS).describe(
        'Models served, with prices in base units per million tokens; replaces the default Anthropic catalog',
      ),
      defaultMaxTokens: z
        .number()
        .int()
        .positive()
        .max(1_000_000)
        .default(4096)
        .describe('max_tokens when a request sets no maxOutputTokens (the API requires one)'),
    })
    .strict(),
  create: ({ config }) => ({
    specVersion: 'v1' as const,
    keySlot: 'ANTHROPIC_API_KEY',
    listModels: () => Promise.resolve(config.models.map((model) => ({ ...model }))),
    doStream: (request) => streamAnthropicMessages(config, request),
  }),
});
