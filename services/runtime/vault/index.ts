import type Router from '@koa/router';
import type { Kernel } from '../../kernel.ts';
import { providerVaultRouter } from './routes.ts';
import { VaultStore } from './store.ts';
import { ProviderVault } from './vault.ts';

export { ProviderKeyUnavailable, type ProviderKeyProblem } from './errors.ts';
export { PROVIDER_VAULT_MESSAGE } from './message.ts';
export type { VaultSession, VaultStatus } from './vault.ts';
export { ProviderVault };

/** The runtime's BYOK vault and its routes, from the kernel's config and TEE backend. */
export function createProviderVault(kernel: Kernel): { vault: ProviderVault; router: Router } {
  const logger = kernel.logger.child({ component: 'provider-vault' });
  const store = new VaultStore({
    persistenceDir: kernel.config.vault.persistenceDir,
    production: kernel.config.mode === 'production',
    tee: kernel.plugins.one('tee-backend'),
    logger,
  });
  const vault = new ProviderVault({
    store,
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
