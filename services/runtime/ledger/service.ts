import type Router from '@koa/router';
import type { Kernel } from '../../kernel.ts';
import { Agents } from '../agents.ts';
import { agentsRouter } from '../agent-routes.ts';
import { Ledger } from './ledger.ts';
import { ledgerRouter } from './routes.ts';

/** The runtime's agents and wallet ledger, composed from the kernel's config, database and clock. */
export interface LedgerService {
  agents: Agents;
  ledger: Ledger;
  routers: Router[];
  /** Background work: the chain watcher, the transfer worker and the sweep. */
  start(): Promise<void>;
  close(): Promise<void>;
}

export function createLedgerService(kernel: Kernel): LedgerService {
  const { config } = kernel;
  const settings = config.ledger;
  const logger = kernel.logger.child({ component: 'ledger' });
  const agents = new Agents({ db: kernel.db, clock: kernel.clock });
  const ledger = new Ledger({
    db: kernel.db,
    clock: kernel.clock,
    logger,
    settings: { minimumBalance: BigInt(settings.minimumBalance) },
  });
  const token = () => ({
    chainId: settings.chainId,
    address: settings.tokenAddress ?? null,
  });
  return {
    agents,
    ledger,
    routers: [agentsRouter(agents), ledgerRouter({ ledger, token })],
    start: async () => undefined,
    close: async () => undefined,
  };
}
