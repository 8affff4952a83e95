import type { SigilConfig } from './config.ts';

/** The LLM provider `sigil up` adds: the local deterministic stand-in (providers/local). */
export const UP_PROVIDER = 'provider-local';

/** Where `sigil up` keeps vault files unless vault.persistenceDir (VAULT_PERSISTENCE_DIR) says. */
export const UP_VAULT_DIR = 'data/vault';

/** The remote `sigil up` lets git-push nodes reach beside canvas-git's defaults: a local `git daemon`. */
export const UP_GIT_REMOTES = ['git://127.0.0.1/', 'git://localhost/'];

/**
 * The canvas node kinds `sigil up` loads, each with the options it gives: canvas-git may push to a
 * `git daemon` on this machine as well as to the forges it allows by default.
 */
const UP_CANVAS_NODES: Record<string, Record<string, unknown>> = {
  'canvas-llm': {},
  'canvas-gateway': {},
  'canvas-transform': {},
  'canvas-approval': {},
  'canvas-workspace': {},
  'canvas-git': {
    allowedRemotes: [
      'https://github.com/',
      'https://gitlab.com/',
      'https://codeberg.org/',
      ...UP_GIT_REMOTES,
    ],
  },
  'canvas-github': {},
  'canvas-chromium': {},
  'canvas-team': {},
};

/**
 * What `sigil up` adds to a config so a new user can chat and run canvas workflows at once: the
 * provider-local stand-in and the built-in canvas node kinds (each unless `plugins` lists it, enabled
 * or not) and a vault directory under ./data, so the gateway's secrets survive a restart (the
 * runtime's provider keys are in the database; provider-vault files kept there before are imported).
 * `sigil runtime` and `sigil gateway` alone get none of them.
 */
export function withUpDefaults(config: SigilConfig): SigilConfig {
  const listed = new Set(config.plugins.map((plugin) => plugin.resolve));
  const added = [[UP_PROVIDER, {}] as const, ...Object.entries(UP_CANVAS_NODES)].filter(
    ([resolve]) => !listed.has(resolve),
  );
  return {
    ...config,
    plugins: [...config.plugins, ...added.map(([resolve, options]) => ({ resolve, enabled: true, options }))],
    vault: { ...config.vault, persistenceDir: config.vault.persistenceDir ?? UP_VAULT_DIR },
  };
}
