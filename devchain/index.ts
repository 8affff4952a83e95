/**
 * The local dev chain for payments: anvil (chain id 8453 by default) with the project's own dollar
 * token, SigilDollar, deployed and a payer wallet funded. What `sigil up` starts when no real chain
 * is configured, and what tests pay on. Nothing here talks to a public network.
 */
import type { Logger } from '../core/log.ts';
import type { SigilConfig } from '../services/config.ts';
import { startAnvil } from './anvil.ts';
import { deploySigilDollar, type DevChainDeployment } from './deploy.ts';
import { withDevChainLedger } from './ledger.ts';
import { withDevChainRail } from './rail.ts';
import { withDevChainOperator } from './runtime.ts';

export { DEV_MNEMONIC, anvilBinaryPath, startAnvil, type AnvilOptions, type AnvilProcess } from './anvil.ts';
export {
  DEFAULT_PAYER_FUNDING,
  FACILITATOR_ACCOUNT_INDEXES,
  OPERATOR_ACCOUNT_INDEX,
  PAYER_ACCOUNT_INDEX,
  RUNTIME_ACCOUNT_INDEX,
  RUNTIME_FUNDING,
  TREASURY_ACCOUNT_INDEX,
  deploySigilDollar,
  devChainDefinition,
  devWallet,
  type DevChainDeployment,
  type DevWallet,
} from './deploy.ts';
export {
  DEV_CHAIN_CONFIRMATIONS,
  LEDGER_OPERATOR_ACCOUNT_INDEX,
  devChainLedgerBanner,
  withDevChainLedger,
} from './ledger.ts';
export {
  DEV_CHAIN_PAYMENT_HINT,
  PAY_OVER_MCP,
  PAY_OVER_REST,
  RUN_FREE,
  payCommand,
  runtimeExamplesBanner,
} from './quick-start.ts';
export { devChainOperatorBanner, withDevChainOperator } from './runtime.ts';
export { DEV_CHAIN_RAIL, devChainBanner, devChainReplicasFacilitator, withDevChainRail } from './rail.ts';
export { devChainSkipReason, type SkipOptions } from './skip.ts';

/**
 * The config wired to the dev chain as `sigil up` wires it: the x402 rail on it (unless `rail` is
 * false), the ledger on it, and the runtime's operator wallet funded there.
 */
export function withDevChain(
  config: SigilConfig,
  chain: DevChainDeployment,
  { rail = true }: { rail?: boolean } = {},
): SigilConfig {
  const paid = rail ? withDevChainRail(config, chain) : config;
  return withDevChainOperator(withDevChainLedger(paid, chain), chain);
}

export interface DevChainOptions {
  /** Progress and unexpected exits of anvil are logged here (addresses only, never keys). */
  logger: Logger;
  /** RPC port; by default the kernel picks a free one. */
  port?: number;
  /** 8453 by default. */
  chainId?: number;
  /** Dollars minted to the payer, in base units; 1000 USD by default. */
  payerFunding?: bigint;
  /** How long anvil may take to answer; 15 s by default. */
  startTimeoutMs?: number;
  /**
   * Where the chain's state is kept between runs (see AnvilOptions.statePath); a start with a saved
   * state finds the token deployed and the balances as they were. Absent: each start is a fresh chain.
   */
  statePath?: string;
}

export interface DevChain extends DevChainDeployment {
  /** Pid of the anvil process. */
  anvilPid: number;
  /** Settles if anvil exits, including unexpectedly. */
  exited: Promise<void>;
  /** Stops anvil, which writes its state file first when it has one. Idempotent. */
  stop(): Promise<void>;
}

export async function startDevChain(options: DevChainOptions): Promise<DevChain> {
  const { logger } = options;
  logger.info(
    { port: options.port || 'picked by the OS', state: options.statePath ?? 'not kept' },
    'dev chain: starting anvil',
  );
  const anvil = await startAnvil({
    logger,
    ...(options.port === undefined ? {} : { port: options.port }),
    ...(options.chainId === undefined ? {} : { chainId: options.chainId }),
    ...(options.startTimeoutMs === undefined ? {} : { startTimeoutMs: options.startTimeoutMs }),
    ...(options.statePath === undefined ? {} : { statePath: options.statePath }),
  });
  logger.info({ rpcUrl: anvil.rpcUrl, chainId: anvil.chainId, pid: anvil.pid }, 'dev chain: anvil listening');
  try {
    const deployment = await deploySigilDollar({
      rpcUrl: anvil.rpcUrl,
      chainId: anvil.chainId,
      logger,
      ...(options.payerFunding === undefined ? {} : { payerFunding: options.payerFunding }),
    });
    return {
      ...deployment,
      anvilPid: anvil.pid,
      exited: anvil.exited,
      stop: async () => {
        await anvil.stop();
        logger.info({ rpcUrl: anvil.rpcUrl }, 'dev chain: stopped');
      },
    };
  } catch (error) {
    await anvil.stop();
    throw error;
  }
}
