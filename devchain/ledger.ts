/**
 * What `sigil up` does for the runtime's wallet ledger on the dev chain: point it at the chain and its
 * dollar token, sweep to the dev treasury, submit transfers from a dev account of its own, and derive
 * deposit addresses from a public dev mnemonic (never in production mode).
 */
import { DEV_DEPOSIT_MNEMONIC } from '../services/runtime/ledger/config.ts';
import type { SigilConfig } from '../services/config.ts';
import { devWallet, type DevChainDeployment } from './deploy.ts';

/** Anvil's dev account that submits the ledger's sweeps and withdrawals (not the rail's facilitator). */
export const LEDGER_OPERATOR_ACCOUNT_INDEX = 3;

/** Anvil mines a block only when a transaction arrives: one confirmation, so deposits count at once. */
export const DEV_CHAIN_CONFIRMATIONS = 1;

/**
 * The config with the ledger pointed at the dev chain, unless the config names a chain of its own
 * (`ledger.rpcUrl`). A configured mnemonic or confirmation depth is kept; without a mnemonic the dev
 * one is used, except in production mode, where the ledger then has no deposit addresses.
 */
export function withDevChainLedger(config: SigilConfig, chain: DevChainDeployment): SigilConfig {
  if (config.ledger.rpcUrl !== undefined) return config;
  const mnemonic =
    config.ledger.depositMnemonic ?? (config.mode === 'production' ? undefined : DEV_DEPOSIT_MNEMONIC);
  return {
    ...config,
    ledger: {
      ...config.ledger,
      rpcUrl: chain.rpcUrl,
      // A loopback URL without a key, and the only way a client finds a chain whose port the OS picks.
      publicRpcUrl: chain.rpcUrl,
      chainId: chain.chainId,
      tokenAddress: chain.token.address,
      treasury: chain.accounts.treasury.address,
      operatorKey: devWallet(LEDGER_OPERATOR_ACCOUNT_INDEX).privateKey,
      confirmations: config.ledger.confirmations ?? DEV_CHAIN_CONFIRMATIONS,
      ...(mnemonic === undefined ? {} : { depositMnemonic: mnemonic }),
    },
  };
}

/** Lines `sigil up` prints after the dev chain's block about the ledger on it. */
export function devChainLedgerBanner(config: SigilConfig): string {
  const { ledger } = config;
  const lines = [
    `ledger     deposits on the dev chain count after ${ledger.confirmations ?? DEV_CHAIN_CONFIRMATIONS} confirmation(s); sweeps go to the treasury`,
  ];
  if (ledger.depositMnemonic === DEV_DEPOSIT_MNEMONIC) {
    lines.push(
      `  mnemonic ${DEV_DEPOSIT_MNEMONIC}`,
      '           deposit addresses come from this public dev mnemonic: dev only, never for real funds',
    );
  } else if (ledger.depositMnemonic === undefined) {
    lines.push(
      '  no deposit addresses: production mode needs ledger.depositMnemonic (LEDGER_DEPOSIT_MNEMONIC)',
    );
  } else {
    lines.push('  deposit addresses come from the configured ledger.depositMnemonic');
  }
  return `${lines.join('\n')}\n`;
}
