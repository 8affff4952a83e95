import { catalogFrom } from '../catalog.ts';

/**
 * The stand-in's models and their prices in base units per million tokens (1 USD = 1_000_000). They
 * all follow the same deterministic rules (model.ts); some have a purpose of their own:
 * - `sigil-echo`: 1 USD in, 2 USD out per million tokens: one base unit per input token and two per
 *   output token, so 10 input and 5 output tokens cost 20 base units;
 * - `sigil-echo-mini`: 0.15 USD in, 0.60 USD out, prices that leave a remainder to round up;
 * - `sigil-slow`: counts `1 2 3 … 1000`, one number every `slowDelayMs` (50 ms), to cancel mid-way;
 * - `sigil-rate-limited`: always answers 429 (with `retry-after: 1`);
 * - `sigil-error`: always answers 500.
 */
export const LOCAL_MODELS = catalogFrom({
  'sigil-echo': [1_000_000n, 2_000_000n],
  'sigil-echo-mini': [150_000n, 600_000n],
  'sigil-slow': [1_000_000n, 2_000_000n],
  'sigil-rate-limited': [1_000_000n, 2_000_000n],
  'sigil-error': [1_000_000n, 2_000_000n],
});

export const RATE_LIMITED_MODEL = 'sigil-rate-limited';
export const FAILING_MODEL = 'sigil-error';
export const SLOW_MODEL = 'sigil-slow';
