import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { pino } from 'pino';
import { createPublicClient, http } from 'viem';
import { readChainIdentity } from '@sigil/plugin-api/chain';
import { startDevChain } from '../../devchain/index.ts';

/**
 * A dev chain kept in a state file is the same chain at every start. anvil adds a block 0 of its own
 * to the state at each start (stamped with that start's time), so after a few restarts block 0 is not
 * the genesis the chain grew from; the identity must not change with it (issue 22's trial: the third
 * plain `npm start` took its own chain for a new one and wrote off the ledger's unswept spend).
 */
describe('dev chain identity across restarts of a kept chain', function () {
  this.timeout(120_000);
  const dir = mkdtempSync(join(tmpdir(), 'sigil-chain-identity-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('is the same at every start from the state file', async () => {
    const statePath = join(dir, 'state.json');
    const identities: string[] = [];
    for (let start = 0; start < 6; start++) {
      const chain = await startDevChain({ logger: pino({ level: 'silent' }), statePath });
      try {
        const client = createPublicClient({ transport: http(chain.rpcUrl) });
        identities.push(JSON.stringify(await readChainIdentity(client, chain.token.address)));
        // Running past anvil's state interval (2 s), as any real run does, lets it write its state.
        await new Promise((resolve) => setTimeout(resolve, 2500));
      } finally {
        await chain.stop();
      }
      // A block 0 anvil makes is stamped in whole seconds: the next start must be in another second.
      await new Promise((resolve) => setTimeout(resolve, 1001 - (Date.now() % 1000)));
    }
    expect(new Set(identities).size, identities.join('\n')).to.equal(1);
  });
});
