import { createPublicClient, http, parseAbi, type Address } from 'viem';
import { ProbeWorld } from '../services/gateway/support.ts';
import type { parseBanner, startSigil } from './cli.ts';

const balanceAbi = parseAbi(['function balanceOf(address account) view returns (uint256)']);

/** What a suite sees of the `sigil up` its hooks started; read it in tests, not at describe time. */
export interface SigilUpSuite {
  up: Awaited<ReturnType<typeof startSigil>>;
  banner: ReturnType<typeof parseBanner>;
  gatewayUrl: string;
  runtimeUrl: string;
  /** The dev token balance of `account` on the chain the banner printed. */
  balanceOf(account: Address): Promise<bigint>;
}

/**
 * Registers before/after hooks in the calling describe: `sigil up` on a fresh ProbeWorld, run until
 * `ready` shows on its output, then stopped with SIGINT as a user would.
 */
export function sigilUpSuite(...args: Parameters<ProbeWorld['sigilUp']>): SigilUpSuite {
  let world: ProbeWorld | undefined;
  const suite = {
    balanceOf: (account: Address) =>
      createPublicClient({ transport: http(suite.banner.rpcUrl) }).readContract({
        address: suite.banner.token,
        abi: balanceAbi,
        functionName: 'balanceOf',
        args: [account],
      }),
  } as SigilUpSuite;
  before(async () => {
    world = await ProbeWorld.start();
    Object.assign(suite, await world.sigilUp(...args));
  });
  after(async () => {
    suite.up?.child.kill('SIGINT');
    await suite.up?.exited;
    await world?.stop();
  });
  return suite;
}
