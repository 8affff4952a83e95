import type Router from '@koa/router';
import type { Hex } from 'viem';
import { KeptLease } from '@sigil/plugin-api';
import type { Logger } from '../../../core/log.ts';
import { jobLeases, type Kernel } from '../../kernel.ts';
import { Agents } from '../agents.ts';
import { agentsRouter } from '../agent-routes.ts';
import { offeredModels } from '../models.ts';
import type { LedgerChain } from './chain.ts';
import { clearBalancesOfAbsentChain, fenceReplacedChain } from './chain-fence.ts';
import { DepositAddresses } from './deposits.ts';
import { Holds } from './holds.ts';
import { Ledger } from './ledger.ts';
import { ledgerRouter } from './routes.ts';
import { Sweeper } from './sweep.ts';
import type { TransferWorker } from './transfer-worker.ts';
import { Transfers } from './transfers.ts';
import { BalanceWatcher } from './watcher.ts';
import { Withdrawals } from './withdrawals.ts';

/** Confirmations when the config names none: about 24 s on Base. */
export const DEFAULT_CONFIRMATIONS = 12;

/** Expired holds are looked for at least this often (and twice per hold lifetime). */
const HOLD_SWEEP_MAX_INTERVAL_MS = 60_000;

/** The runtime's agents and wallet ledger, composed from the kernel's config, database and clock. */
export interface LedgerService {
  agents: Agents;
  ledger: Ledger;
  /** Reservations of running requests (chat); expired ones are released by its sweep. */
  holds: Holds;
  deposits: DepositAddresses;
  /** Present when the ledger is pointed at a chain (ledger.rpcUrl and its companions). */
  chain: LedgerChain | undefined;
  watcher: BalanceWatcher | undefined;
  transfers: Transfers;
  withdrawals: Withdrawals;
  /** Moves recorded withdrawals and sweeps on chain; present with a chain and a deposit mnemonic. */
  worker: TransferWorker | undefined;
  /** Moves unsettled spend to the treasury every sweep.intervalSeconds; present with a worker and a treasury. */
  sweeper: Sweeper | undefined;
  routers: Router[];
  /**
   * Checks the deposit mnemonic against the stored addresses and the chain against the one recorded
   * (chain-fence.ts), then starts the background work.
   */
  start(): Promise<void>;
  close(): Promise<void>;
}

export async function createLedgerService(kernel: Kernel): Promise<LedgerService> {
  const { config } = kernel;
  const settings = config.ledger;
  kernel.secrets.add(settings.depositMnemonic);
  kernel.secrets.add(settings.operatorKey);
  // The dev chain's URL is both: what the operator publishes is no secret.
  if (settings.rpcUrl !== settings.publicRpcUrl) kernel.secrets.add(settings.rpcUrl);
  const logger = kernel.logger.child({ component: 'ledger' });
  const confirmations = settings.confirmations ?? DEFAULT_CONFIRMATIONS;
  const agents = new Agents({ db: kernel.db, clock: kernel.clock });
  const ledger = new Ledger({
    db: kernel.db,
    clock: kernel.clock,
    logger,
    settings: { minimumBalance: BigInt(settings.minimumBalance) },
  });
  // The timed passes (hold expiry, sweep, full balance refresh): each interval's on one replica.
  const jobs = jobLeases(kernel);
  const holdTtlMs = settings.holdTtlSeconds * 1000;
  const holds = new Holds({
    ...jobs,
    ledger,
    logger,
    ttlMs: holdTtlMs,
    sweepIntervalMs: Math.min(holdTtlMs / 2, HOLD_SWEEP_MAX_INTERVAL_MS),
  });
  // The chain's and the deposit keys' modules (viem's clients and HD accounts, some 450 modules with
  // their dependencies) load only for a ledger that has them: `sigil up` without a chain starts
  // without them (issue 30, start-up).
  const keys =
    settings.depositMnemonic === undefined
      ? undefined
      : new (await import('./deposit-keys.ts')).DepositKeys(settings.depositMnemonic);
  const deposits = new DepositAddresses({ db: kernel.db, clock: kernel.clock, keys });
  const chain =
    settings.rpcUrl && settings.tokenAddress && settings.operatorKey
      ? new (await import('./chain.ts')).LedgerChain({
          rpcUrl: settings.rpcUrl,
          chainId: settings.chainId,
          token: settings.tokenAddress as Hex,
          operatorKey: settings.operatorKey as Hex,
          confirmations,
          pollingIntervalMs: Math.min(settings.pollIntervalMs, 1000),
        })
      : undefined;
  const watcher = chain
    ? new BalanceWatcher({
        ...jobs,
        db: kernel.db,
        ledger,
        deposits,
        chain,
        logger,
        clock: kernel.clock,
        pollMs: settings.pollIntervalMs,
        refreshMs: settings.balanceRefreshSeconds * 1000,
      })
    : undefined;
  const transfers = new Transfers(ledger, kernel.replica);
  const worker =
    chain && keys
      ? new (await import('./transfer-worker.ts')).TransferWorker({
          transfers,
          deposits,
          keys,
          chain,
          sender: operatorLease(kernel, chain, logger),
          logger,
          clock: kernel.clock,
          pollMs: settings.pollIntervalMs,
        })
      : undefined;
  const sweeper =
    chain && worker && settings.treasury
      ? new Sweeper({
          ...jobs,
          db: kernel.db,
          transfers,
          deposits,
          chain,
          worker,
          treasury: settings.treasury as Hex,
          minimumAmount: BigInt(settings.sweep.minimumAmount),
          ttlSeconds: settings.withdrawals.authorizationTtlSeconds,
          intervalMs: settings.sweep.intervalSeconds * 1000,
          clock: kernel.clock,
          logger,
        })
      : undefined;
  const withdrawals = new Withdrawals({
    transfers,
    deposits,
    chain,
    worker,
    treasury: settings.treasury as Hex | undefined,
    limits: {
      minAmount: BigInt(settings.withdrawals.minAmount),
      maxAmount: BigInt(settings.withdrawals.maxAmount),
      dailyTotal: BigInt(settings.withdrawals.dailyTotal),
      maxPerHour: settings.withdrawals.maxPerHour,
      authorizationTtlSeconds: settings.withdrawals.authorizationTtlSeconds,
    },
  });
  const token = () => ({
    chainId: settings.chainId,
    network: `eip155:${settings.chainId}`,
    address: settings.tokenAddress ?? null,
    ...(settings.publicRpcUrl === undefined ? {} : { rpcUrl: settings.publicRpcUrl }),
  });
  return {
    agents,
    ledger,
    holds,
    deposits,
    chain,
    watcher,
    transfers,
    withdrawals,
    worker,
    sweeper,
    routers: [
      agentsRouter(agents, () => offeredModels(kernel.plugins)),
      ledgerRouter({
        ledger,
        deposits,
        withdrawals,
        transfers,
        token,
        confirmations,
        watching: chain !== undefined,
      }),
    ],
    start: async () => {
      await deposits.verifyMnemonic();
      if (!chain) {
        await clearBalancesOfAbsentChain({ db: kernel.db, ledger, logger });
        holds.start();
        logger.info('ledger: no chain configured (ledger.rpcUrl): balances are not read from a chain');
        return;
      }
      // Before anything reads the chain or moves money on it. An RPC down now does not stop the
      // runtime (a real chain is not replaced; the dev chain is up before the runtime starts).
      await fenceReplacedChain({ db: kernel.db, ledger, transfers, chain, logger }).catch((err: unknown) =>
        logger.warn(
          { err: (err as Error).message },
          'ledger: cannot read the chain to check it is the one recorded; not checked this run',
        ),
      );
      holds.start();
      await watcher?.start();
      await worker?.start();
      sweeper?.start();
      logger.info(
        { chainId: settings.chainId, token: settings.tokenAddress, confirmations },
        'ledger: watching deposit addresses',
      );
    },
    close: async () => {
      await holds.stop();
      await sweeper?.stop();
      await watcher?.stop();
      await worker?.stop();
    },
  };
}

/**
 * The lease of the operator account (named after its address on the chain), which the transfer worker
 * keeps while the runtime runs: the replica holding it is the only one sending from the account.
 */
function operatorLease(kernel: Kernel, chain: LedgerChain, logger: Logger): KeptLease {
  const account = `${chain.options.chainId}:${chain.operator.address}`;
  return new KeptLease(kernel.leases, {
    names: [`ledger:operator:${account}`],
    ttlMs: kernel.config.database.leaseSeconds * 1000,
    changed: (now) =>
      logger.info(
        { operator: chain.operator.address },
        now
          ? 'ledger: this replica sends the withdrawals and sweeps (it holds the operator account)'
          : 'ledger: another replica sends the withdrawals and sweeps (it holds the operator account)',
      ),
    failed: (err) =>
      logger.warn({ err: (err as Error).message }, 'ledger: the operator account’s lease could not be kept'),
  });
}
