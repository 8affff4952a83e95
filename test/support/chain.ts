import { pino } from 'pino';
import {
  startDevChain as startServiceDevChain,
  type DevChain,
  type DevChainOptions,
} from '../../devchain/index.ts';

export type { DevChain } from '../../devchain/index.ts';

/**
 * A fresh local chain (anvil, chain id 8453) with SigilDollar deployed and the payer funded, for
 * tests that pay. Starts in well under a second; call `stop()` in `after`. Anvil dies with the test
 * process even if that is killed.
 */
export function startDevChain(options: Partial<DevChainOptions> = {}): Promise<DevChain> {
  return startServiceDevChain({ logger: pino({ level: 'silent' }), ...options });
}
