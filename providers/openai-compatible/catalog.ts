import { catalogFrom } from '@sigil/plugin-api/llm';

/**
 * Default catalog: OpenAI's list prices in base units per million tokens (1 USD = 1_000_000), as
 * published when written. Operators check them and replace them with `models` in the plugin's options
 * (also for any other OpenAI-compatible server).
 */
export const OPENAI_MODELS = catalogFrom({
  'gpt-5': [1_250_000n, 10_000_000n],
  'gpt-5-mini': [250_000n, 2_000_000n],
  'gpt-5-nano': [50_000n, 400_000n],
  'gpt-4.1': [2_000_000n, 8_000_000n],
  'gpt-4.1-mini': [400_000n, 1_600_000n],
  'gpt-4.1-nano': [100_000n, 400_000n],
  'gpt-4o': [2_500_000n, 10_000_000n],
  'gpt-4o-mini': [150_000n, 600_000n],
  o3: [2_000_000n, 8_000_000n],
  'o4-mini': [1_100_000n, 4_400_000n],
});
