import type Router from '@koa/router';
import type { Kernel } from '../../kernel.ts';
import { providerVaultRouter } from './routes.ts';
import { VaultStore } from './store.ts';
import { VaultUnlocks } from './unlocks.ts';
import { ProviderVault } from './vault.ts';

export { ProviderKeyUnavailable, type ProviderKeyProblem, type UnlockedOn } from './errors.ts';
export { PROVIDER_VAULT_MESSAGE } from './message.ts';
export type { VaultSession, VaultStatus } from './vault.ts';
export { VAULT_CHECK_TTL_MS } from './vault.ts';
export { ProviderVault };

/** The runtime's BYOK vault and its routes, from the kernel's config and TEE backend. */
export function createProviderVault(kernel: Kernel): { vault: ProviderVault; router: Router } {
  const logger = kernel.logger.child({ component: 'provider-vault' });
  const store = new VaultStore({
    db: kernel.db,
    clock: kernel.clock,
    persistenceDir: kernel.config.vault.persistenceDir,
    strict: kernel.config.mode === 'production' || kernel.replica.shared,
    atRest: {
      dataKey: kernel.config.database.dataKey,
      logger,
      production: kernel.config.mode === 'production',
    },
    tee: kernel.plugins.one('tee-backend'),
    logger,
  });
  const vault = new ProviderVault({
    store,
    unlocks: new VaultUnlocks(kernel.db, kernel.clock, kernel.replica, logger),
    clock: kernel.clock,
    logger,
    registry: kernel.secrets,
    knownSlots: () => {
      const names = kernel.plugins
        .list()
        .filter((plugin) => plugin.kind === 'llm-provider')
        .map((plugin) => plugin.name);
      const slots = new Map<string, string[]>();
      kernel.plugins.all('llm-provider').forEach((provider, index) => {
        const users = slots.get(provider.keySlot) ?? [];
        users.push(names[index] ?? provider.keySlot);
        slots.set(provider.keySlot, users);
      });
      return slots;
    },
  });
  return { vault, router: providerVaultRouter(vault) };
}
