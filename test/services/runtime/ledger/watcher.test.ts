import { expect } from 'chai';
import { ManualClock } from '../../../../core/clock.ts';
import { Services, newWallet } from '../../../core/auth/support.ts';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import { describeEachDatabase, stickyDatabase, TEST_DATABASES } from '../../../support/kernel.ts';
import { createLedgerService } from '../../../../services/runtime/ledger/service.ts';
import { fundedAccount, ledgerOnChain, mine, sendToken } from './chain-support.ts';
import { eventually, MIDWEEK, openLedgerWorld, randomWallet } from './support.ts';

describe('ledger: balance watcher on anvil', function () {
  this.timeout(120_000);
  let chain: DevChain;
  before(async () => {
    chain = await startDevChain();
  });
  after(() => chain?.stop());

  describeEachDatabase('watcher', (database) => {
    it('counts a deposit only once its block has the configured confirmations (3), and records it once', async () => {
      const world = await openLedgerWorld(database, {
        config: { ledger: ledgerOnChain(chain, { confirmations: 3 }) },
      });
      try {
        const { watcher, deposits, ledger } = world.service;
        await watcher!.poll(); // sets the cursor at the confirmed head
        const wallet = randomWallet();
        const deposit = await deposits.of(wallet);
        const funder = await fundedAccount(chain, 20_000_000n);
        const mined = await sendToken(chain, funder, deposit.address, 5_000_000n);
        let report = await watcher!.poll();
        expect(report.confirmedBlock).to.equal(mined - 2n); // one confirmation so far
        expect((await ledger.balance(wallet)).onChainBalance).to.equal(0n);
        await mine(chain, 1); // two
        await watcher!.poll();
        expect((await ledger.balance(wallet)).available).to.equal(0n);
        await mine(chain, 1); // three: counted
        report = await watcher!.poll();
        expect(report.confirmedBlock).to.equal(mined);
        expect(report.deposits).to.equal(1);
        const balance = await ledger.balance(wallet);
        expect(balance).to.include({
          onChainBalance: 5_000_000n,
          available: 5_000_000n,
          balanceBlock: mined,
        });
        const history = await ledger.history(wallet, { limit: 10 });
        expect(history.entries.map((e) => [e.kind, e.amount])).to.deep.equal([['deposit', 5_000_000n]]);
        expect(history.entries[0]!.reference).to.match(/^0x[0-9a-f]{64}:\d+$/);
        await mine(chain, 2);
        expect((await watcher!.poll({ fullRefresh: true })).deposits).to.equal(0);
        expect((await ledger.history(wallet, { limit: 10 })).entries).to.have.length(1);
      } finally {
        await world.close();
      }
    });

    it('reads every deposit address at the first poll of a process, then once per balanceRefreshSeconds, not at each poll', async () => {
      const world = await openLedgerWorld(database, {
        config: { ledger: ledgerOnChain(chain, { confirmations: 1, balanceRefreshSeconds: 60 }) },
      });
      try {
        const { watcher, deposits, ledger } = world.service;
        const wallet = randomWallet();
        await deposits.of(wallet);
        expect((await watcher!.poll()).refreshed).to.equal(1); // the first poll reads every address
        expect((await watcher!.poll()).refreshed).to.equal(0); // no Transfer event: nothing to read
        const readAt = async () => (await ledger.balance(wallet)).balanceBlock;
        const before = await readAt();
        await mine(chain, 1);
        // MIDWEEK begins an interval: the first one due is the next (as with a timer, an interval on).
        world.clock.advance(59_999);
        expect(await watcher!.refreshDue()).to.equal(false);
        world.clock.advance(1);
        expect(await watcher!.refreshDue()).to.equal(true);
        expect((await readAt()) > before, 'read again at the newer block').to.equal(true);
        expect(await watcher!.refreshDue(), 'once per interval').to.equal(false);
      } finally {
        await world.close();
      }
    });

    it('a restart resumes from the stored cursor; a deposit it never saw as an event is still read by balanceOf', async () => {
      const sticky = stickyDatabase(database);
      const config = { ledger: ledgerOnChain(chain, { confirmations: 1 }) };
      let world = await openLedgerWorld(sticky.database, { config });
      try {
        const wallet = randomWallet();
        const deposit = await world.service.deposits.of(wallet);
        const funder = await fundedAccount(chain, 20_000_000n);
        // Before the watcher ever ran: no event is read for it, the first full refresh reads the balance.
        await sendToken(chain, funder, deposit.address, 1_000_000n);
        await world.service.watcher!.poll();
        expect((await world.ledger.balance(wallet)).onChainBalance).to.equal(1_000_000n);
        await world.close();
        await sendToken(chain, funder, deposit.address, 2_000_000n); // while nothing runs
        world = await openLedgerWorld(sticky.database, { config });
        const report = await world.service.watcher!.poll();
        expect(report.deposits).to.equal(1);
        expect((await world.ledger.balance(wallet)).onChainBalance).to.equal(3_000_000n);
        const kinds = (await world.ledger.history(wallet, { limit: 10 })).entries.map((e) => e.amount);
        expect(kinds).to.deep.equal([2_000_000n]);
      } finally {
        await world.close();
        await sticky.drop();
      }
    });
  });

  it('as a new user: sign in, GET /wallet/deposit-address, send tokens, GET /wallet/balance shows them once confirmed', async () => {
    const services = await Services.start({
      database: TEST_DATABASES[0]!,
      clock: new ManualClock(MIDWEEK),
      config: { ledger: ledgerOnChain(chain, { confirmations: 2, pollIntervalMs: 50 }) },
    });
    // The app's routes read the database this second service's watcher writes to.
    const service = await createLedgerService(services.kernel);
    await service.start();
    try {
      const user = newWallet();
      const jwt = await services.signIn('runtime', user);
      const res = await services.get('runtime', '/wallet/deposit-address', jwt);
      expect(res.status).to.equal(200);
      const body = (await res.json()) as {
        address: `0x${string}`;
        confirmations: number;
        token: { address: string };
      };
      expect(body.confirmations).to.equal(2);
      expect(body.token.address).to.equal(chain.token.address);
      const funder = await fundedAccount(chain, 10_000_000n);
      await sendToken(chain, funder, body.address, 4_200_000n);
      await mine(chain, 1);
      const balance = await eventually('the confirmed deposit', async () => {
        const read = (await (await services.get('runtime', '/wallet/balance', jwt)).json()) as Record<
          string,
          string
        >;
        return read.onChainBalance === '4200000' ? read : undefined;
      });
      expect(balance).to.include({ available: '4200000', unsettledSpend: '0', pendingWithdrawals: '0' });
      // The address is its owner's: another wallet is given its own.
      const other = await services.signIn('runtime', newWallet());
      const theirs = (await (await services.get('runtime', '/wallet/deposit-address', other)).json()) as {
        address: string;
      };
      expect(theirs.address).to.not.equal(body.address);
    } finally {
      await service.close();
      await services.close();
    }
  });
});
