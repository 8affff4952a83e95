import { createWalletAuth, type WalletAuth } from '../../core/auth/index.ts';
import type { Kernel } from '../kernel.ts';

/** The runtime's wallet auth: sign-in and session JWTs, no wallet tokens, no acting for others. */
export function runtimeAuth(kernel: Kernel): WalletAuth {
  const { config } = kernel;
  return createWalletAuth(kernel, {
    service: 'runtime',
    section: config.runtime,
    routePrefix: '/auth',
    jwtTtlSeconds: config.auth.runtimeJwtTtlSeconds,
    walletTokens: false,
    enforceOperatorSignatures: false,
    actingForWallets: false,
    // One list for the deployment, kept in the gateway's section: an operator is one at either service.
    operators: config.gateway.operatorWallets,
  });
}
