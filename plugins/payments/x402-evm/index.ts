import { coreServices, definePlugin } from '@sigil/plugin-api';
import { configSchema, facilitatorKeys } from './config.ts';
import { X402EvmRail } from './rail.ts';

/**
 * x402 v2 `exact` payments on an EVM chain (Base, chain 8453, in production; the local dev chain
 * otherwise): EIP-712 signed EIP-3009 authorizations of a dollar token, verified and settled by a
 * facilitator in this process or a remote one.
 */
export default definePlugin({
  kind: 'payment-rail',
  name: 'payments-x402-evm',
  specVersion: 'v1',
  description: 'x402 v2 exact scheme: EIP-3009 transferWithAuthorization of a dollar token on an EVM chain',
  config: configSchema,
  dependencies: { secrets: coreServices.secrets, clock: coreServices.clock, leases: coreServices.leases },
  create: ({ config, deps, logger }) => {
    if (config.facilitator.kind === 'builtin')
      for (const key of facilitatorKeys(config.facilitator)) deps.secrets.add(key);
    return new X402EvmRail(config, { clock: deps.clock, leasing: { leases: deps.leases, logger } });
  },
});

export { configSchema, X402EvmRail };
export type { X402EvmConfig } from './config.ts';
