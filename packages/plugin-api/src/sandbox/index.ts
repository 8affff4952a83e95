/**
 * `@sigil/plugin-api/sandbox`: what every `sandbox-runtime` plugin does alike: the schema of its
 * limits (an operator's defaults and a spec's overrides) with the defaults, and `kill()` with a
 * grace period. The network allow-list is `@sigil/plugin-api/egress`.
 */
export * from './kill-after-grace.ts';
export * from './limits.ts';
