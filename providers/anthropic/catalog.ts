import { catalogFrom } from '@sigil/plugin-api/llm';

/**
 * Default catalog: Anthropic's list prices in base units per million tokens (1 USD = 1_000_000), as
 * published when written. Operators check them and replace them with `models` in the plugin's options.
 */
export const ANTHROPIC_MODELS = catalogFrom({
  'claude-opus-4-1': [15_000_000n, 75_000_000n],
  'claude-opus-4-0': [15_000_000n, 75_000_000n],
  'claude-sonnet-4-5': [3_000_000n, 15_000_000n],
  'claude-sonnet-4-0': [3_000_000n, 15_000_000n],
  'claude-haiku-4-5': [1_000_000n, 5_000_000n],
  'claude-3-5-haiku-latest': [800_000n, 4_000_000n],
});
