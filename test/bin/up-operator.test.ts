import { expect } from 'chai';
import { configSchema } from '../../services/config.ts';
import {
  devChainOperatorBanner,
  devWallet,
  RUNTIME_ACCOUNT_INDEX,
  withDevChainLedger,
  withDevChainOperator,
  type DevChainDeployment,
} from '../../devchain/index.ts';

/** A deployment as deploySigilDollar describes one (no chain is needed to decide the config). */
const chain: DevChainDeployment = {
  rpcUrl: 'http://127.0.0.1:8545',
  chainId: 8453,
  token: {
    address: '0x5FbDB2315678afecb367f032d93F642f64180aa3',
    name: 'Sigil Dollar',
    version: '1',
    decimals: 6,
  },
  accounts: {
    operator: devWallet(0),
    payer: devWallet(1),
    runtime: devWallet(RUNTIME_ACCOUNT_INDEX),
    treasury: { address: devWallet(2).address },
  },
  multicall3: '0xcA11bde05977b3631167028862bE2a173976CA11',
  payerBalance: 1_000_000_000n,
};

describe('sigil up: the runtime’s operator wallet on the dev chain', () => {
  const onChain = (input: Record<string, unknown> = {}) =>
    withDevChainLedger(configSchema.parse(input), chain);

  it('gives the runtime the dev chain’s funded runtime account when the ledger is on that chain', () => {
    const config = withDevChainOperator(onChain(), chain);
    expect(config.runtime.operatorKey).to.equal(chain.accounts.runtime.privateKey);
    const banner = devChainOperatorBanner(config, chain);
    expect(banner).to.include(chain.accounts.runtime.address);
    expect(banner).to.not.include(chain.accounts.runtime.privateKey.slice(2));
  });

  it('never in production mode, never over a configured key, never for a ledger on another chain', () => {
    expect(withDevChainOperator(onChain({ mode: 'production' }), chain).runtime.operatorKey).to.equal(
      undefined,
    );
    const own = `0x${'ab'.repeat(32)}`;
    expect(
      withDevChainOperator(onChain({ runtime: { operatorKey: own } }), chain).runtime.operatorKey,
    ).to.equal(own);
    const elsewhere = configSchema.parse({
      ledger: {
        rpcUrl: 'http://127.0.0.1:9999',
        tokenAddress: chain.token.address,
        treasury: chain.accounts.treasury.address,
        operatorKey: devWallet(3).privateKey,
        depositMnemonic: 'test test test test test test test test test test test junk',
      },
    });
    const config = withDevChainOperator(withDevChainLedger(elsewhere, chain), chain);
    expect(config.runtime.operatorKey).to.equal(undefined);
    expect(devChainOperatorBanner(config, chain)).to.equal('');
  });
});
