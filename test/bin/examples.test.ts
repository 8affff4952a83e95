import { readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { expect } from 'chai';
import { loadConfig } from '../../services/config.ts';
import teeNone from '../../attestation/none/index.ts';
import { configSchema as x402EvmConfigSchema } from '../../plugins/payments/x402-evm/config.ts';
import { builtinPlugins } from '../../services/builtin-plugins.ts';
import { devChainSkipReason } from '../../devchain/index.ts';
import { repoPath } from '../support/paths.ts';

const EXAMPLE = repoPath('examples', 'base-mainnet.config.json');

describe('examples/base-mainnet.config.json', () => {
  const { config } = loadConfig({ path: EXAMPLE, env: {} });
  const rail = config.plugins.find((plugin) => plugin.resolve === 'payments-x402-evm');

  it('is a valid config that pays with Base USDC on chain 8453', () => {
    expect(rail).to.not.equal(undefined);
    expect(rail?.options).to.deep.include({
      network: 'eip155:8453',
      asset: {
        address: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
        name: 'USD Coin',
        version: '2',
        decimals: 6,
      },
    });
    expect(rail?.options.facilitator).to.deep.equal({
      kind: 'remote',
      url: 'https://facilitator.example.com',
    });
  });

  it('refuses to load until payTo is a real address, and then passes the rail’s schema', () => {
    const asIs = x402EvmConfigSchema.safeParse(rail?.options);
    expect(asIs.success).to.equal(false);
    expect(asIs.error?.issues.map((issue) => issue.path.join('.'))).to.deep.equal(['payTo']);
    const edited = x402EvmConfigSchema.parse({
      ...rail?.options,
      payTo: '0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC',
    });
    expect(edited.pricePerCall).to.equal(500n);
  });

  it('names the public URLs and refuses to load tee-none until its keyMaterial is replaced (replicas share PostgreSQL)', () => {
    expect(config.database.url).to.match(/^postgres:/);
    expect(config.runtime.publicUrl).to.equal('https://agents.example.com');
    expect(config.gateway.publicUrl).to.equal('https://tools.example.com');
    const tee = config.plugins.find((plugin) => plugin.resolve === 'tee-none');
    expect(teeNone.config.safeParse(tee?.options).success, 'the placeholder').to.equal(false);
    expect(teeNone.config.safeParse({ keyMaterial: 'a'.repeat(64) }).success).to.equal(true);
  });

  it('starts no local chain under sigil up: it lists a payment rail', async () => {
    expect(
      await devChainSkipReason(config, { builtins: builtinPlugins, baseDir: dirname(EXAMPLE) }),
    ).to.equal('plugins.3 (payments-x402-evm) is a payment rail');
  });

  it('is what docs/payments.md shows', () => {
    const page = readFileSync(repoPath('docs', 'payments.md'), 'utf8');
    const { network, rpcUrl, asset, payTo, facilitator } = rail?.options as Record<string, unknown>;
    const shown = JSON.stringify({ network, rpcUrl, asset, payTo, facilitator });
    const block = /```json\n(\{\n {2}"resolve": "payments-x402-evm"[\s\S]*?)```/.exec(page)?.[1];
    expect(block, 'docs/payments.md shows the rail of the example').to.not.equal(undefined);
    const options = (JSON.parse(block ?? '{}') as { options: Record<string, unknown> }).options;
    expect(JSON.stringify(options)).to.equal(shown);
  });
});
