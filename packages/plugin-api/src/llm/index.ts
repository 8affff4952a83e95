/**
 * Helpers for `llm-provider` plugins (`@sigil/plugin-api/llm`), whatever wire their upstream speaks:
 * model catalogs and prices in plugin options, what a turn costs, the connection options of an HTTP
 * provider, and streams that keep the contract's promises about endings and cancellation. The client
 * for the OpenAI Chat Completions wire is `@sigil/plugin-api/llm/openai` (it needs the `openai` SDK).
 */
export { catalogFrom, modelCatalogOption, priceOption } from './catalog.ts';
export { BASE_UNITS_PER_USD, baseLlmCost, formatUsd, type LlmPrices, type LlmTokenUsage } from './cost.ts';
export { connectionOptions } from './options.ts';
export { estimatedUsage, guardedStream, parseToolInput } from './stream.ts';
