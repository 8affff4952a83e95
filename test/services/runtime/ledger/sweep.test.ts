import { expect } from 'chai';
import type { Address } from 'viem';
import { generatePrivateKey, privateKeyToAccount, type LocalAccount } from 'viem/accounts';
import type { Transfer } from '../../../../services/runtime/ledger/transfer-records.ts';
import { chainClients } from '../../../solidity/support.ts';
import { chainBehindProxy, sendsTransaction } from '../../gateway/payments/support.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { fundedAccount, ledgerOnChain, mine, sendToken, tokenBalance } from './chain-support.ts';
import { eventually, openLedgerWorld, randomWallet, transfersDueNow, type LedgerWorld } from './support.ts';

const USD = 1_000_000n;

describe('ledger: settlement sweep on anvil', function () {
  this.timeout(120_000);
  const rpc = chainBehindProxy();

  describeEachDatabase('sweep', (database) => {
    let world: LedgerWorld;
    let settings: ReturnType<typeof ledgerOnChain>;
    let funder: LocalAccount;

    beforeEach(async () => {
      settings = ledgerOnChain(rpc.chain, {
        rpcUrl: rpc.proxy.url,
        confirmations: 1,
        sweep: { intervalSeconds: 3600, minimumAmount: String(USD) },
      });
      world = await openLedgerWorld(database, { config: { ledger: settings } });
      funder ??= await fundedAccount(rpc.chain, 1000n * USD);
    });
    afterEach(() => world?.close());

    async function walletWithSpend(deposit: bigint, charges: bigint[]) {
      const wallet = randomWallet();
      const address = (await world.service.deposits.of(wallet)).address;
      await sendToken(rpc.chain, funder, address, deposit);
      await world.service.watcher!.poll({ fullRefresh: true });
      const agentId = (await world.service.agents.create(wallet, { name: 'a', model: 'm' })).id;
      for (const [i, amount] of charges.entries()) {
        await world.ledger.charge({ wallet, agentId, amount, idempotencyKey: `c${i}-${Math.random()}` });
      }
      return { wallet, deposit: address, agentId };
    }
    const finished = (id: string): Promise<Transfer> =>
      eventually(`sweep ${id}`, async () => {
        // As the worker's timer would: the clock moves a poll interval before each pass.
        world.clock.advance(settings.pollIntervalMs!);
        await world.service.worker!.processDue();
        const t = await world.service.transfers.get(id);
        return t && (t.state === 'completed' || t.state === 'failed') ? t : undefined;
      });
    async function expectAgreement(wallet: Address, deposit: Address): Promise<void> {
      await world.service.watcher!.poll({ fullRefresh: true });
      const balance = await world.ledger.balance(wallet);
      expect(balance.onChainBalance).to.equal(await tokenBalance(rpc.chain, deposit));
      expect((await world.ledger.audit(wallet)).mismatches).to.deep.equal([]);
    }

    it('moves exactly the unsettled spend to the treasury, turning it into settled spend; available does not move', async () => {
      const { wallet, deposit } = await walletWithSpend(10n * USD, [USD, 1_500_000n, 500_000n]);
      const before = await world.ledger.balance(wallet);
      expect(before).to.include({ unsettledSpend: 3n * USD, available: 7n * USD });
      const [sweep, ...others] = await world.service.sweeper!.sweep();
      expect(others.filter((t) => t.wallet === wallet)).to.deep.equal([]);
      expect(sweep).to.include({ wallet, amount: 3n * USD, to: settings.treasury, kind: 'sweep' });
      expect((await finished(sweep!.id)).state).to.equal('completed');
      expect(await tokenBalance(rpc.chain, settings.treasury)).to.equal(3n * USD);
      expect(await tokenBalance(rpc.chain, deposit)).to.equal(7n * USD);
      // The deposit address signed; the operator paid the gas.
      expect(await chainClients(rpc.chain).publicClient.getBalance({ address: deposit })).to.equal(0n);
      const after = await world.ledger.balance(wallet);
      expect(after).to.include({
        onChainBalance: 7n * USD,
        unsettledSpend: 0n,
        settledSpend: 3n * USD,
        available: 7n * USD,
      });
      expect((await world.ledger.history(wallet, { limit: 1 })).entries[0]).to.include({
        kind: 'settlement',
        amount: 3n * USD,
        reference: sweep!.id,
      });
      await expectAgreement(wallet, deposit);
    });

    it('leaves spend below the minimum where it is, and never sweeps the same spend twice', async () => {
      const { wallet, agentId } = await walletWithSpend(10n * USD, [500_000n]);
      expect((await world.service.sweeper!.sweep()).filter((t) => t.wallet === wallet)).to.deep.equal([]);
      await world.ledger.charge({ wallet, agentId, amount: 700_000n, idempotencyKey: 'more' });
      rpc.proxy.intercept = (methods) => (sendsTransaction(methods) ? 'cut' : 'forward');
      const first = (await world.service.sweeper!.sweep()).filter((t) => t.wallet === wallet);
      expect(first.map((t) => t.amount)).to.deep.equal([1_200_000n]);
      // Still open (the send is cut): a second sweep finds nothing new to take...
      expect((await world.service.sweeper!.sweep()).filter((t) => t.wallet === wallet)).to.deep.equal([]);
      // ...until more spend arrives, and then only that.
      await world.ledger.charge({ wallet, agentId, amount: USD, idempotencyKey: 'again' });
      const second = (await world.service.sweeper!.sweep()).filter((t) => t.wallet === wallet);
      expect(second.map((t) => t.amount)).to.deep.equal([USD]);
      rpc.proxy.intercept = undefined;
      await transfersDueNow(world);
      for (const sweep of [...first, ...second])
        expect((await finished(sweep.id)).state).to.equal('completed');
      expect(await world.ledger.balance(wallet)).to.include({ unsettledSpend: 0n, settledSpend: 2_200_000n });
    });

    it('a sweep that cannot go through fails and changes no entry; the next sweep takes the spend', async () => {
      const { wallet, deposit } = await walletWithSpend(5n * USD, [2n * USD]);
      rpc.proxy.intercept = (methods) => (sendsTransaction(methods) ? 'cut' : 'forward');
      const [sweep] = (await world.service.sweeper!.sweep()).filter((t) => t.wallet === wallet);
      await chainClients(rpc.chain).publicClient.request({
        method: 'evm_increaseTime' as never,
        params: [3601] as never,
      });
      await mine(rpc.chain, 1);
      await transfersDueNow(world);
      expect((await finished(sweep!.id)).state).to.equal('failed');
      expect(await world.ledger.balance(wallet)).to.include({
        unsettledSpend: 2n * USD,
        settledSpend: 0n,
        available: 3n * USD,
      });
      rpc.proxy.intercept = undefined;
      const [retry] = (await world.service.sweeper!.sweep()).filter((t) => t.wallet === wallet);
      expect(retry!.amount).to.equal(2n * USD);
      expect((await finished(retry!.id)).state).to.equal('completed');
      expect(await world.ledger.balance(wallet)).to.include({
        unsettledSpend: 0n,
        settledSpend: 2n * USD,
        available: 3n * USD,
      });
      await expectAgreement(wallet, deposit);
    });

    it('a sweep and a withdrawal of one wallet at once: both complete, and chain and ledger agree', async () => {
      const { wallet, deposit } = await walletWithSpend(10n * USD, [4n * USD]);
      const to = privateKeyToAccount(generatePrivateKey()).address;
      const [[sweep], { transfer }] = await Promise.all([
        world.service.sweeper!.sweep().then((all) => all.filter((t) => t.wallet === wallet)),
        world.service.withdrawals.request(wallet, { amount: 6n * USD, to, idempotencyKey: 'all-the-rest' }),
      ]);
      expect((await world.ledger.balance(wallet)).available).to.equal(0n);
      expect((await finished(sweep!.id)).state).to.equal('completed');
      expect((await finished(transfer.id)).state).to.equal('completed');
      expect(await tokenBalance(rpc.chain, deposit)).to.equal(0n);
      expect(await tokenBalance(rpc.chain, to)).to.equal(6n * USD);
      expect(await world.ledger.balance(wallet)).to.include({
        onChainBalance: 0n,
        unsettledSpend: 0n,
        pendingWithdrawals: 0n,
        settledSpend: 4n * USD,
        withdrawn: 6n * USD,
        available: 0n,
      });
      await expectAgreement(wallet, deposit);
    });
  });
});
