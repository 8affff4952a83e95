import { z } from 'zod';
import { definePlugin, LlmProviderError, type LlmProviderV1 } from '@sigil/plugin-api';
import { streamOpenAiChat } from '@sigil/plugin-api/llm/openai';
import { LOCAL_MODELS, startStandIn, type StandIn } from '@sigil/plugin-api/llm/stand-in';

export {
  LOCAL_MODELS,
  startStandIn,
  type StandIn,
  type StandInOptions,
  type StandInStats,
} from '@sigil/plugin-api/llm/stand-in';

/** The local provider's instance: the contract, plus where its stand-in listens once started. */
export interface LocalProvider extends LlmProviderV1 {
  /** The running stand-in (its `url`, `stats()`), or undefined before `start()` and after `stop()`. */
  readonly standIn: StandIn | undefined;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * A deterministic stand-in LLM on this machine (`@sigil/plugin-api/llm/stand-in`): `start()` runs a server that
 * speaks the OpenAI and Anthropic wire formats, and the provider streams from it over the OpenAI wire
 * with the same client as provider-openai-compatible. No model, no external call, no account.
 */
export default definePlugin({
  kind: 'llm-provider',
  name: 'provider-local',
  specVersion: 'v1',
  description:
    'Local deterministic stand-in LLM (OpenAI and Anthropic wire formats), for development and tests',
  config: z
    .object({
      host: z.string().min(1).default('127.0.0.1').describe('Address the stand-in listens on'),
      port: z.number().int().min(0).max(65535).default(0).describe('Its port; 0 lets the OS pick one'),
      apiKeys: z
        .array(z.string().min(1))
        .min(1)
        .optional()
        .describe('Keys it accepts; absent: any non-empty key not starting with "invalid"'),
      slowDelayMs: z
        .number()
        .int()
        .min(0)
        .max(10_000)
        .default(50)
        .describe('Pause between streamed events of the sigil-slow model'),
    })
    .strict(),
  create: ({ config, logger }): LocalProvider => {
    let standIn: StandIn | undefined;
    return {
      specVersion: 'v1',
      keySlot: 'PROVIDER_API_KEY',
      get standIn() {
        return standIn;
      },
      start: async () => {
        standIn = await startStandIn({
          host: config.host,
          port: config.port,
          slowDelayMs: config.slowDelayMs,
          ...(config.apiKeys ? { apiKeys: config.apiKeys } : {}),
        });
        logger.info({ url: standIn.url }, 'local LLM stand-in listening');
      },
      stop: async () => {
        const running = standIn;
        standIn = undefined;
        await running?.close();
      },
      listModels: () => Promise.resolve(LOCAL_MODELS.map((model) => ({ ...model }))),
      doStream: (request) => {
        if (!standIn) {
          return (async function* () {
            yield* [];
            throw new LlmProviderError(
              'upstream',
              'local: the stand-in is not running (the plugin is not started)',
            );
          })();
        }
        return streamOpenAiChat(
          {
            provider: 'local',
            baseURL: `${standIn.url}/v1`,
            timeoutMs: 600_000,
            maxRetries: 0,
            maxTokensParameter: 'max_tokens',
          },
          request,
        );
      },
    };
  },
});
