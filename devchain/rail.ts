/**
 * What `sigil up` does with the dev chain: decide whether to start it, point a payment rail at it,
 * and print what a developer needs to pay on it.
 */
import { formatUnits } from 'viem';
import type { PluginEntry } from '../core/config/schema.ts';
import type { SigilConfig } from '../services/config.ts';
import { devWallet, FACILITATOR_ACCOUNT_INDEXES, type DevChainDeployment } from './deploy.ts';
import { DEV_CHAIN_PAYMENT_HINT } from './quick-start.ts';

/** The built-in payment rail the dev chain is wired to. */
export const DEV_CHAIN_RAIL = 'payments-x402-evm';

/**
 * The config with a `payments-x402-evm` plugin on the dev chain appended: its dollar token, payments
 * to the treasury, and a facilitator in this process that settles from the operator's account; and
 * the gateway's 402 answers say how to pay there.
 */
export function withDevChainRail(config: SigilConfig, chain: DevChainDeployment): SigilConfig {
  const rail: PluginEntry = {
    resolve: DEV_CHAIN_RAIL,
    enabled: true,
    options: {
      // Anvil answers WebSocket on the same port: a fraction of HTTP's cost per request.
      rpcUrl: chain.rpcUrl.replace(/^http/, 'ws'),
      network: `eip155:${chain.chainId}`,
      asset: {
        address: chain.token.address,
        name: chain.token.name,
        version: chain.token.version,
        decimals: chain.token.decimals,
      },
      payTo: chain.accounts.treasury.address,
      facilitator: { kind: 'builtin', privateKey: chain.accounts.operator.privateKey },
    },
  };
  return {
    ...config,
    // 402 answers name the examples that pay on this chain, unless the operator wrote a hint of their own.
    gateway: { ...config.gateway, paymentHint: config.gateway.paymentHint ?? DEV_CHAIN_PAYMENT_HINT },
    plugins: [...config.plugins, rail],
  };
}

/**
 * The dev chain rail's facilitator for several gateway replicas: the built-in one settling from
 * FACILITATOR_ACCOUNT_INDEXES, each replica leasing one account (give at most that many replicas).
 */
export function devChainReplicasFacilitator(): { kind: 'builtin'; privateKeys: string[] } {
  return {
    kind: 'builtin',
    privateKeys: FACILITATOR_ACCOUNT_INDEXES.map((index) => devWallet(index).privateKey),
  };
}

/**
 * The block `sigil up` prints on stdout (never in the log): where the chain is, and the dev wallet
 * to pay with. Its key is anvil's well-known dev key, so printing it gives nothing away.
 */
export function devChainBanner(chain: DevChainDeployment, statePath?: string): string {
  const { token, accounts } = chain;
  const dollars = formatUnits(chain.payerBalance, token.decimals);
  return [
    `dev chain  ${chain.rpcUrl} (chain id ${chain.chainId}, local anvil; stops with sigil)`,
    ...(statePath === undefined
      ? []
      : [`  state    ${statePath} (kept between runs; delete it, with sigil stopped, for a new chain)`]),
    `  token    ${token.address} (${token.name}, ${token.decimals} decimals)`,
    `  treasury ${accounts.treasury.address} (payTo: receives the payments)`,
    `  payer    ${accounts.payer.address} (dev wallet, ${dollars} dollars of the token)`,
    `  key      ${accounts.payer.privateKey}`,
    `           a public test key (anvil's dev mnemonic): for this local chain only, never for real funds`,
    '',
  ].join('\n');
}
