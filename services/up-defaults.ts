import type { SigilConfig } from './config.ts';

/** The LLM provider `sigil up` adds: the local deterministic stand-in (providers/local). */
export const UP_PROVIDER = 'provider-local';

/** Where `sigil up` keeps vault ciphertext unless vault.persistenceDir (VAULT_PERSISTENCE_DIR) says. */
export const UP_VAULT_DIR = 'data/vault';

/**
 * What `sigil up` adds to a config so a new user can chat at once: the provider-local stand-in
 * (unless plugins lists it, enabled or not) and a vault directory under ./data, so stored provider
 * keys survive a restart. `sigil runtime` and `sigil gateway` alone get neither.
 */
export function withUpDefaults(config: SigilConfig): SigilConfig {
  const listed = config.plugins.some((plugin) => plugin.resolve === UP_PROVIDER);
  return {
    ...config,
    plugins: listed
      ? config.plugins
      : [...config.plugins, { resolve: UP_PROVIDER, enabled: true, options: {} }],
    vault: { ...config.vault, persistenceDir: config.vault.persistenceDir ?? UP_VAULT_DIR },
  };
}
