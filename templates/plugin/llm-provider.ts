import { z } from 'zod';
import {
  definePlugin,
  type LlmChatRequest,
  type LlmModelInfo,
  type LlmProviderV1,
  type LlmStreamPart,
  SigilError,
} from '@sigil/plugin-api';

/** Options an operator gives under `plugins[].options`, checked at start-up. */
const config = z
  .object({
    baseUrl: z.url().default('https://api.example.com/v1').describe('Where the upstream answers'),
  })
  .strict();

const notImplemented = (member: string): SigilError =>
  new SigilError('internal', `template-plugin-name: ${member} is not implemented yet`);

/**
 * An `llm-provider` (the contract: LlmProviderV1 in @sigil/plugin-api). Fill in each member; the kit
 * in test/kit.test.ts checks every sentence of the contract and fails until you do.
 */
class Provider implements LlmProviderV1 {
  readonly specVersion = 'v1';
  /** The wallet's key slot this provider reads its API key from. */
  readonly keySlot = 'TEMPLATE_PLUGIN_NAME_API_KEY';

  constructor(private readonly options: z.infer<typeof config>) {}

  async listModels(): Promise<readonly LlmModelInfo[]> {
    throw notImplemented('listModels');
  }

  // eslint-disable-next-line require-yield -- a stub: it throws before its first part
  async *doStream(_request: LlmChatRequest): AsyncIterable<LlmStreamPart> {
    throw notImplemented('doStream');
  }
}

export default definePlugin({
  kind: 'llm-provider',
  name: 'template-plugin-name',
  specVersion: 'v1',
  description: 'template-plugin-name: an LLM provider',
  config,
  create: ({ config: options }) => new Provider(options),
});
