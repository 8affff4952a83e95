/**
 * What `sigil up` gives the runtime on the dev chain: an operator wallet with dollars, so the tool loop
 * of a chat pays the gateway's x402 price of a paid tool out of the box (README: Chat, "Tools").
 */
import type { SigilConfig } from '../services/config.ts';
import type { DevChainDeployment } from './deploy.ts';

/**
 * The config with `runtime.operatorKey` set to the dev chain's runtime account, when the ledger is on
 * that chain (the tool loop pays in the ledger's token) and no key is configured. Never in production
 * mode: a public dev key must not pay, nor sign gateway requests, there. The key is a secret like any
 * configured one: the runtime registers it for redaction, so no log line shows it.
 */
export function withDevChainOperator(config: SigilConfig, chain: DevChainDeployment): SigilConfig {
  if (config.mode === 'production' || config.runtime.operatorKey !== undefined) return config;
  if (config.ledger.rpcUrl !== chain.rpcUrl || config.ledger.tokenAddress !== chain.token.address)
    return config;
  return { ...config, runtime: { ...config.runtime, operatorKey: chain.accounts.runtime.privateKey } };
}

/** The line `sigil up` prints about the runtime's operator wallet (its address, never its key). */
export function devChainOperatorBanner(config: SigilConfig, chain: DevChainDeployment): string {
  if (config.runtime.operatorKey !== chain.accounts.runtime.privateKey) return '';
  return `  runtime  ${chain.accounts.runtime.address} (the runtime's operator wallet: pays chat tool calls)\n`;
}
