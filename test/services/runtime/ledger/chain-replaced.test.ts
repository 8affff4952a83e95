import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { balanceOf } from '../../../../services/runtime/ledger/balance.ts';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import { describeEachDatabase, stickyDatabase } from '../../../support/kernel.ts';
import { genesisTimestamp, untilWallClockPasses } from '../../../solidity/support.ts';
import { blockNumber, fundedAccount, ledgerOnChain, sendToken } from './chain-support.ts';
import { openLedgerWorld, randomWallet, type LedgerWorld } from './support.ts';

describe('ledger: a dev chain kept between runs, and one replaced', function () {
  this.timeout(120_000);

  it('available is never negative: spend beyond the on-chain balance is a shortfall, not a negative balance', () => {
    const wallet = randomWallet();
    const balance = balanceOf(wallet, {
      wallet,
      on_chain_balance: '0',
      balance_block: '9',
      balance_updated_at: '1',
      unsettled_spend: '1519',
      settled_spend: '0',
      pending_withdrawals: '0',
      withdrawn: '0',
      held_spend: '0',
    });
    expect(balance.available).to.equal(0n);
    expect(balance.shortfall).to.equal(1519n);
  });

  describeEachDatabase('restarts', (database) => {
    let dir: string;
    const chains: DevChain[] = [];
    beforeEach(() => {
      dir = mkdtempSync(join(tmpdir(), 'sigil-chain-replaced-'));
    });
    afterEach(async () => {
      await Promise.all(chains.splice(0).map((chain) => chain.stop()));
      rmSync(dir, { recursive: true, force: true });
    });

    it('kept in its state file the chain is the same and the ledger carries on; a new chain fences the old one: no negative available, unsettled spend written off, open sweep failed, balances read again', async () => {
      const statePath = join(dir, 'devchain', 'state.json');
      const sticky = stickyDatabase(database);
      const first = await startDevChain({ statePath });
      chains.push(first);
      const firstGenesis = await genesisTimestamp(first);
      // One ledger configuration (its deposit mnemonic above all) across every run; only the RPC URL
      // changes (anvil's port is picked anew at each start).
      const ledgerConfig = ledgerOnChain(first, { confirmations: 1 });
      const open = async (chain: DevChain | undefined, start = true): Promise<LedgerWorld> => {
        const ledger = chain
          ? { ...ledgerConfig, rpcUrl: chain.rpcUrl }
          : { ...ledgerConfig, rpcUrl: undefined, tokenAddress: undefined, operatorKey: undefined };
        const world = await openLedgerWorld(sticky.database, { config: { ledger } });
        if (start) await world.service.start();
        return world;
      };
      const wallet = randomWallet();
      let world = await open(first);
      try {
        const deposit = await world.service.deposits.of(wallet);
        await sendToken(first, await fundedAccount(first, 10_000_000n), deposit.address, 5_000_000n);
        await world.service.watcher!.poll();
        const agent = await world.service.agents.create(wallet, { name: 'a', model: 'local-echo' });
        await world.ledger.charge({ wallet, agentId: agent.id, amount: 1519n, idempotencyKey: 'call-1' });
        expect(await world.ledger.balance(wallet)).to.include({
          onChainBalance: 5_000_000n,
          unsettledSpend: 1519n,
          available: 5_000_000n - 1519n,
        });
        await world.close();
        await first.stop();

        // Started again from its state: the same chain, nothing fenced.
        const again = await startDevChain({ statePath });
        chains.push(again);
        expect(again.token.address).to.equal(first.token.address);
        world = await open(again);
        await world.service.watcher!.poll({ fullRefresh: true });
        const kept = await world.ledger.balance(wallet);
        expect(kept).to.include({
          onChainBalance: 5_000_000n,
          unsettledSpend: 1519n,
          available: 5_000_000n - 1519n,
        });
        expect((await world.ledger.history(wallet, { limit: 10 })).entries.map((e) => e.kind)).to.deep.equal([
          'charge',
          'deposit',
        ]);
        await world.close();
        // A sweep of that spend, open when the chain goes (recorded with no worker running to send it).
        world = await open(again, false);
        const sweep = await world.service.transfers.openSweep({
          wallet,
          from: deposit.address,
          treasury: ledgerConfig.treasury,
          minimumAmount: 1n,
          ttlSeconds: 600,
          head: { block: await blockNumber(again), timestamp: BigInt(Math.floor(Date.now() / 1000)) },
        });
        expect(sweep).to.not.equal(undefined);
        await world.close();
        await again.stop();

        // Its state gone: a new chain, the same token address, none of the old balances. Its genesis
        // differs only by its timestamp (whole seconds): one started in the same second as the first
        // would be the same chain by every identity a chain shows, so the new one starts a second later.
        await untilWallClockPasses(firstGenesis);
        rmSync(statePath);
        const fresh = await startDevChain({ statePath });
        chains.push(fresh);
        expect(fresh.token.address).to.equal(first.token.address);
        world = await open(fresh);
        await world.service.watcher!.poll();
        const fenced = await world.ledger.balance(wallet);
        expect(fenced).to.include({ onChainBalance: 0n, unsettledSpend: 0n, available: 0n, shortfall: 0n });
        const history = await world.ledger.history(wallet, { limit: 10 });
        expect(history.entries.map((e) => [e.kind, e.amount])).to.deep.equal([
          ['chain_replaced', 1519n],
          ['charge', 1519n],
          ['deposit', 5_000_000n],
        ]);
        expect(await world.service.transfers.get(sweep!.id)).to.include({ state: 'failed' });
        expect((await world.ledger.audit()).mismatches).to.deep.equal([]);
        // Deposits on the new chain count as usual.
        await sendToken(fresh, await fundedAccount(fresh, 10_000_000n), deposit.address, 2_000_000n);
        await world.service.watcher!.poll();
        expect(await world.ledger.balance(wallet)).to.include({
          onChainBalance: 2_000_000n,
          available: 2_000_000n,
        });
        await world.close();

        // No chain at all (DEV_CHAIN=false): the last chain's balance is not shown as if it were live.
        world = await open(undefined);
        expect(await world.ledger.balance(wallet)).to.include({ onChainBalance: 0n, available: 0n });
        await world.close();
        // Back on that chain: read again, nothing fenced.
        world = await open(fresh);
        await world.service.watcher!.poll();
        expect(await world.ledger.balance(wallet)).to.include({
          onChainBalance: 2_000_000n,
          available: 2_000_000n,
        });
        expect((await world.ledger.history(wallet, { limit: 10 })).entries).to.have.length(4);
      } finally {
        await world.close();
        await sticky.drop();
      }
    });
  });
});
