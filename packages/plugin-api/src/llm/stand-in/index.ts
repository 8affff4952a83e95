/**
 * A deterministic stand-in LLM (`@sigil/plugin-api/llm/stand-in`): a small HTTP server on this machine
 * that speaks the OpenAI Chat Completions and Anthropic Messages wires, with no model and no external
 * call. `provider-local` runs one for `sigil up`; an `llm-provider` plugin's own tests point the
 * behaviour kit at one as its upstream (its slow, rate-limited and failing models give the kit what it
 * needs to check cancellation and errors).
 */
export { startStandIn, type StandIn, type StandInOptions, type StandInStats } from './stand-in.ts';
export { FAILING_MODEL, LOCAL_MODELS, RATE_LIMITED_MODEL, SLOW_MODEL } from './catalog.ts';
export { countTokens, reply, requestedToolCalls } from './model.ts';
export { FACETS_SCHEMA_ID, LEARNINGS_SCHEMA_ID } from './reflect.ts';
