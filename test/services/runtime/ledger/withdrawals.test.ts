import { expect } from 'chai';
import { zeroAddress, type Address, type Hex } from 'viem';
import { generatePrivateKey, privateKeyToAccount, type LocalAccount } from 'viem/accounts';
import type { SigilError } from '@sigil/plugin-api';
import { CANCEL_AUTHORIZATION_TYPES } from '../../../../services/runtime/ledger/chain.ts';
import { DepositKeys } from '../../../../services/runtime/ledger/deposit-keys.ts';
import { SpendRefused } from '../../../../services/runtime/ledger/errors.ts';
import type { Transfer } from '../../../../services/runtime/ledger/transfer-records.ts';
import { chainClients, sigilDollarAbi, tokenDomain } from '../../../solidity/support.ts';
import { chainBehindProxy, sendsTransaction } from '../../gateway/payments/support.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { fundedAccount, ledgerOnChain, mine, sendToken, tokenBalance } from './chain-support.ts';
import { eventually, openLedgerWorld, randomWallet, transfersDueNow, type LedgerWorld } from './support.ts';

const USD = 1_000_000n;

describe('ledger: withdrawals on anvil', function () {
  this.timeout(120_000);
  const rpc = chainBehindProxy();

  describeEachDatabase('withdrawals', (database) => {
    let world: LedgerWorld;
    let settings: ReturnType<typeof ledgerOnChain>;
    let funder: LocalAccount;

    beforeEach(async () => {
      settings = ledgerOnChain(rpc.chain, { rpcUrl: rpc.proxy.url, confirmations: 1 });
      world = await openLedgerWorld(database, { config: { ledger: settings } });
      await world.service.watcher!.poll(); // the cursor: deposits from now on are recorded in the history
      funder ??= await fundedAccount(rpc.chain, 1000n * USD);
    });
    afterEach(() => world?.close());

    /** A wallet with `amount` confirmed at its deposit address. */
    async function fundedWallet(amount: bigint): Promise<{ wallet: Address; deposit: Address }> {
      const wallet = randomWallet();
      const deposit = (await world.service.deposits.of(wallet)).address;
      await sendToken(rpc.chain, funder, deposit, amount);
      await world.service.watcher!.poll({ fullRefresh: true });
      expect((await world.ledger.balance(wallet)).onChainBalance).to.equal(amount);
      return { wallet, deposit };
    }
    const fresh = () => privateKeyToAccount(generatePrivateKey()).address;
    /** A withdrawal of 1 USD from a wallet holding 5, requested while the RPC refuses every send. */
    async function withdrawalWhileSendsRefused(idempotencyKey: string) {
      const { wallet, deposit } = await fundedWallet(5n * USD);
      rpc.proxy.intercept = (methods) => (sendsTransaction(methods) ? 'cut' : 'forward');
      const to = fresh();
      const { transfer } = await world.service.withdrawals.request(wallet, {
        amount: USD,
        to,
        idempotencyKey,
      });
      return { wallet, deposit, to, transfer };
    }
    /** Runs the worker as its timer would, the clock moving a poll interval before each pass. */
    const settle = async (id: string): Promise<Transfer> =>
      eventually(`withdrawal ${id} finished`, async () => {
        world.clock.advance(settings.pollIntervalMs!);
        await world.service.worker!.processDue();
        const transfer = await world.service.transfers.get(id);
        return transfer && (transfer.state === 'completed' || transfer.state === 'failed')
          ? transfer
          : undefined;
      });
    /** The ledger agrees with the chain: the cached balance is the deposit address's, the audit holds. */
    async function expectAgreement(wallet: Address, deposit: Address): Promise<void> {
      await world.service.watcher!.poll({ fullRefresh: true });
      const balance = await world.ledger.balance(wallet);
      expect(balance.onChainBalance).to.equal(await tokenBalance(rpc.chain, deposit));
      expect(balance.available).to.equal(
        balance.onChainBalance - balance.unsettledSpend - balance.pendingWithdrawals,
      );
      expect((await world.ledger.audit(wallet)).mismatches).to.deep.equal([]);
    }

    it('request → pending at once (pendingWithdrawals) → transferred by the operator → completed; chain and ledger agree', async () => {
      const { wallet, deposit } = await fundedWallet(10n * USD);
      const to = fresh();
      const operatorEther = await chainClients(rpc.chain).publicClient.getBalance({
        address: world.service.chain!.operator.address,
      });
      const { transfer } = await world.service.withdrawals.request(wallet, {
        amount: 3n * USD,
        to,
        idempotencyKey: 'w1',
      });
      expect(transfer.state).to.equal('pending');
      const held = await world.ledger.balance(wallet);
      // Counted at once, before anything reached the chain.
      expect(held.pendingWithdrawals === 3n * USD || held.withdrawn === 3n * USD).to.equal(true);
      expect(held.available).to.equal(7n * USD);
      const done = await settle(transfer.id);
      expect(done.state).to.equal('completed');
      expect(done.txHash).to.match(/^0x[0-9a-f]{64}$/);
      expect(await tokenBalance(rpc.chain, to)).to.equal(3n * USD);
      expect(await tokenBalance(rpc.chain, deposit)).to.equal(7n * USD);
      const balance = await world.ledger.balance(wallet);
      expect(balance).to.include({
        onChainBalance: 7n * USD,
        pendingWithdrawals: 0n,
        withdrawn: 3n * USD,
        available: 7n * USD,
      });
      // The deposit address needed no ether: the operator paid the gas.
      expect(await chainClients(rpc.chain).publicClient.getBalance({ address: deposit })).to.equal(0n);
      const operatorAfter = await chainClients(rpc.chain).publicClient.getBalance({
        address: world.service.chain!.operator.address,
      });
      expect(operatorAfter < operatorEther).to.equal(true);
      const kinds = (await world.ledger.history(wallet, { limit: 10 })).entries.map((e) => e.kind);
      expect(kinds).to.deep.equal(['withdrawal_complete', 'withdrawal_hold', 'deposit']);
      await expectAgreement(wallet, deposit);
    });

    it('completes only once the transfer has the configured confirmations', async () => {
      await world.close();
      world = await openLedgerWorld(database, { config: { ledger: { ...settings, confirmations: 3 } } });
      const wallet = randomWallet();
      const deposit = (await world.service.deposits.of(wallet)).address;
      await sendToken(rpc.chain, funder, deposit, 5n * USD);
      await mine(rpc.chain, 2);
      await world.service.watcher!.poll({ fullRefresh: true });
      const { transfer } = await world.service.withdrawals.request(wallet, {
        amount: USD,
        to: fresh(),
        idempotencyKey: 'c',
      });
      await eventually('sent', async () => {
        await world.service.worker!.processDue();
        return (await world.service.transfers.get(transfer.id))?.state === 'submitted';
      });
      await transfersDueNow(world);
      await world.service.worker!.processDue();
      expect((await world.service.transfers.get(transfer.id))!.state).to.equal('submitted');
      expect((await world.ledger.balance(wallet)).pendingWithdrawals).to.equal(USD);
      await mine(rpc.chain, 2);
      await transfersDueNow(world);
      expect((await settle(transfer.id)).state).to.equal('completed');
      await mine(rpc.chain, 2);
      await expectAgreement(wallet, deposit);
    });

    it('an idempotency key withdraws once: concurrent replays give one withdrawal and one transfer; another amount is 409', async () => {
      const { wallet, deposit } = await fundedWallet(10n * USD);
      const to = fresh();
      const results = await Promise.all(
        Array.from({ length: 10 }, () =>
          world.service.withdrawals.request(wallet, { amount: 2n * USD, to, idempotencyKey: 'same' }),
        ),
      );
      expect(new Set(results.map((r) => r.transfer.id)).size).to.equal(1);
      expect(results.filter((r) => !r.replayed)).to.have.length(1);
      const err = await world.service.withdrawals
        .request(wallet, { amount: 3n * USD, to, idempotencyKey: 'same' })
        .then(
          () => undefined,
          (e: unknown) => e as SigilError,
        );
      expect(err?.code).to.equal('conflict');
      await settle(results[0]!.transfer.id);
      expect(await tokenBalance(rpc.chain, to)).to.equal(2n * USD);
      await expectAgreement(wallet, deposit);
    });

    it('guardrails refuse, with the limit and changing nothing: amount bounds, available, daily total, requests per hour', async () => {
      await world.close();
      world = await openLedgerWorld(database, {
        config: {
          ledger: {
            ...settings,
            withdrawals: {
              minAmount: '10000',
              maxAmount: String(5n * USD),
              dailyTotal: String(6n * USD),
              maxPerHour: 3,
              authorizationTtlSeconds: 3600,
            },
          },
        },
      });
      const { wallet, deposit } = await fundedWallet(8n * USD);
      const to = fresh();
      const refused = async (amount: bigint, key: string) =>
        world.service.withdrawals.request(wallet, { amount, to, idempotencyKey: key }).then(
          () => {
            throw new Error('expected a refusal');
          },
          (e: unknown) => e as SigilError,
        );
      let err = await refused(9_999n, 'small');
      expect([err.code, err.details?.limit]).to.deep.equal(['invalid_request', 'minAmount']);
      err = await refused(5n * USD + 1n, 'big');
      expect([err.code, err.details?.limit]).to.deep.equal(['invalid_request', 'maxAmount']);
      await world.service.withdrawals.request(wallet, { amount: 4n * USD, to, idempotencyKey: 'a' });
      err = await refused(2n * USD + 1n, 'over-day');
      expect(err.code).to.equal('rate_limited');
      expect(err.details).to.deep.include({
        limit: 'dailyTotal',
        remaining: String(2n * USD),
        resetsAt: '2026-03-19T00:00:00.000Z',
      });
      expect(err.headers?.['Retry-After']).to.match(/^\d+$/);
      await world.service.withdrawals.request(wallet, { amount: USD, to, idempotencyKey: 'b' });
      await world.service.withdrawals.request(wallet, { amount: 10_000n, to, idempotencyKey: 'c' });
      err = await refused(10_000n, 'd');
      expect(err.code).to.equal('rate_limited');
      expect(err.details).to.deep.include({ limit: 'maxPerHour', maxPerHour: 3 });
      // The next day (and more than an hour later) both limits have room again; available decides.
      world.clock.advance(24 * 3_600_000);
      err = await refused(5n * USD, 'too-much');
      expect(err).to.be.instanceOf(SpendRefused);
      expect(err.details).to.include({ limit: 'available' });
      const { transfers: open } = await world.service.transfers.list(wallet, 'withdrawal', { limit: 10 });
      expect(open.map((t) => t.amount).sort((a, b) => (a < b ? -1 : 1))).to.deep.equal([
        10_000n,
        USD,
        4n * USD,
      ]);
      const balance = await world.ledger.balance(wallet);
      expect(balance.pendingWithdrawals + balance.withdrawn).to.equal(5n * USD + 10_000n);
      for (const t of open) await settle(t.id);
      await expectAgreement(wallet, deposit);
    });

    it('address checks: checksum, zero address, token contract, treasury, operator, any deposit address', async () => {
      const { wallet } = await fundedWallet(5n * USD);
      const other = (await world.service.deposits.of(randomWallet())).address;
      const good = fresh();
      const cases: [string, RegExp][] = [
        [good.toLowerCase(), /EIP-55 checksum/],
        [
          good.replace(/[a-f]/, (c) => c.toUpperCase()) === good
            ? good.replace(/[A-F]/, (c) => c.toLowerCase())
            : good.replace(/[a-f]/, (c) => c.toUpperCase()),
          /EIP-55 checksum/,
        ],
        ['0x1234', /20-byte hex address/],
        [zeroAddress, /zero address/],
        [rpc.chain.token.address, /token contract/],
        [settings.treasury, /service's own addresses/],
        [world.service.chain!.operator.address, /service's own addresses/],
        [other, /deposit address/],
        [(await world.service.deposits.of(wallet)).address, /deposit address/],
      ];
      for (const [to, message] of cases) {
        const err = await world.service.withdrawals
          .request(wallet, { amount: USD, to, idempotencyKey: `addr-${to}` })
          .then(
            () => undefined,
            (e: unknown) => e as SigilError,
          );
        expect(err?.code, to).to.equal('invalid_request');
        expect(err?.message, to).to.match(message);
      }
      expect(await world.service.transfers.open(wallet)).to.deep.equal([]);
      expect((await world.ledger.balance(wallet)).available).to.equal(5n * USD);
    });

    it('a transfer that would revert (deposit address drained behind the ledger’s back) is canceled on chain, then failed: its funds are no longer pending', async () => {
      const { wallet, deposit } = await fundedWallet(5n * USD);
      // The deposit key moves the tokens out itself, so the ledger's transfer must fail.
      const keys = new DepositKeys(settings.depositMnemonic as string);
      const index = (await world.service.deposits.of(wallet)).index;
      const depositAccount = keys.account(index);
      await chainClients(rpc.chain).operatorWallet.sendTransaction({ to: deposit, value: 10n ** 16n });
      const { publicClient, walletFor } = chainClients(rpc.chain);
      const drained = await walletFor(depositAccount).writeContract({
        address: rpc.chain.token.address,
        abi: sigilDollarAbi,
        functionName: 'transfer',
        args: [funder.address, 5n * USD],
      });
      await publicClient.waitForTransactionReceipt({ hash: drained });
      const { transfer } = await world.service.withdrawals.request(wallet, {
        amount: 2n * USD,
        to: fresh(),
        idempotencyKey: 'x',
      });
      expect((await world.ledger.balance(wallet)).pendingWithdrawals).to.equal(2n * USD);
      const done = await settle(transfer.id);
      expect(done.state).to.equal('failed');
      expect(done.cancelTxHash).to.match(/^0x[0-9a-f]{64}$/);
      expect(done.reason, done.reason).to.match(/canceled/);
      // The authorization is dead on chain: it can never move money later.
      expect(await world.service.chain!.authorizationState(deposit, transfer.nonce)).to.equal(true);
      const balance = await world.ledger.balance(wallet);
      expect(balance.pendingWithdrawals).to.equal(0n);
      const kinds = (await world.ledger.history(wallet, { limit: 10 })).entries.map((e) => e.kind);
      expect(kinds.slice(0, 2)).to.deep.equal(['withdrawal_release', 'withdrawal_hold']);
      await expectAgreement(wallet, deposit);
      expect((await world.ledger.balance(wallet)).available).to.equal(0n);
    });

    it('an authorization canceled by the key holder before it was sent: failed, funds restored, nothing moved', async () => {
      const { wallet, deposit, to, transfer } = await withdrawalWhileSendsRefused('k');
      const keys = new DepositKeys(settings.depositMnemonic as string);
      const depositAccount = keys.account((await world.service.deposits.of(wallet)).index);
      const signature = await depositAccount.signTypedData({
        domain: tokenDomain(rpc.chain),
        types: CANCEL_AUTHORIZATION_TYPES,
        primaryType: 'CancelAuthorization',
        message: { authorizer: deposit, nonce: transfer.nonce },
      });
      const { publicClient, operatorWallet } = chainClients(rpc.chain);
      await publicClient.waitForTransactionReceipt({
        hash: await operatorWallet.writeContract({
          address: rpc.chain.token.address,
          abi: sigilDollarAbi,
          functionName: 'cancelAuthorization',
          args: [deposit, transfer.nonce as Hex, signature],
        }),
      });
      rpc.proxy.intercept = undefined;
      await transfersDueNow(world);
      const done = await settle(transfer.id);
      expect(done.state).to.equal('failed');
      expect(await tokenBalance(rpc.chain, to)).to.equal(0n);
      expect((await world.ledger.balance(wallet)).available).to.equal(5n * USD);
      await expectAgreement(wallet, deposit);
    });

    it('the RPC refuses the send, then is back: retried with the same authorization, transferred once', async () => {
      const { wallet, deposit, to, transfer } = await withdrawalWhileSendsRefused('r');
      await eventually('a failed attempt', async () => {
        await world.service.worker!.processDue();
        const row = await world.service.transfers.get(transfer.id);
        return row && row.attempts > 0 ? row : undefined;
      });
      expect((await world.service.transfers.get(transfer.id))!.state).to.equal('pending');
      rpc.proxy.intercept = undefined;
      await transfersDueNow(world);
      expect((await settle(transfer.id)).state).to.equal('completed');
      expect(await tokenBalance(rpc.chain, to)).to.equal(USD);
      await expectAgreement(wallet, deposit);
    });

    it('a failed attempt is tried again only once the clock passes its backoff (1 s after a first failure)', async () => {
      const { wallet, deposit, to, transfer } = await withdrawalWhileSendsRefused('b');
      await world.service.worker!.processDue();
      const failed = (await world.service.transfers.get(transfer.id))!;
      expect(failed).to.include({ state: 'pending', attempts: 1 });
      rpc.proxy.intercept = undefined;
      const sentBefore = rpc.proxy.transactionsSent();
      world.clock.advance(999);
      await world.service.worker!.processDue();
      expect(rpc.proxy.transactionsSent()).to.equal(sentBefore);
      expect(await world.service.transfers.get(transfer.id)).to.deep.equal(failed);
      world.clock.advance(1);
      await world.service.worker!.processDue();
      expect(rpc.proxy.transactionsSent()).to.equal(sentBefore + 1);
      expect((await settle(transfer.id)).state).to.equal('completed');
      expect(await tokenBalance(rpc.chain, to)).to.equal(USD);
      await expectAgreement(wallet, deposit);
    });

    it('the transaction reaches the chain but its answer is lost: the next attempt finds it, no second transfer', async () => {
      const { wallet, deposit } = await fundedWallet(5n * USD);
      rpc.proxy.intercept = (methods) => (sendsTransaction(methods) ? 'lose-answer' : 'forward');
      const to = fresh();
      const sentBefore = rpc.proxy.transactionsSent();
      const { transfer } = await world.service.withdrawals.request(wallet, {
        amount: USD,
        to,
        idempotencyKey: 'l',
      });
      await eventually('the transfer on chain', async () => (await tokenBalance(rpc.chain, to)) === USD);
      rpc.proxy.intercept = undefined;
      await transfersDueNow(world);
      const done = await settle(transfer.id);
      expect(done.state).to.equal('completed');
      expect(rpc.proxy.transactionsSent() - sentBefore).to.equal(1);
      expect(await tokenBalance(rpc.chain, to)).to.equal(USD);
      await expectAgreement(wallet, deposit);
    });

    it('never mined before its validBefore (the RPC refuses every send): failed once expired, funds restored', async () => {
      const { wallet, deposit } = await fundedWallet(5n * USD);
      rpc.proxy.intercept = (methods) => (sendsTransaction(methods) ? 'cut' : 'forward');
      const { transfer } = await world.service.withdrawals.request(wallet, {
        amount: USD,
        to: fresh(),
        idempotencyKey: 'e',
      });
      const { publicClient } = chainClients(rpc.chain);
      await publicClient.request({ method: 'evm_increaseTime' as never, params: [3601] as never });
      await mine(rpc.chain, 1);
      await transfersDueNow(world);
      const done = await settle(transfer.id);
      expect(done.state).to.equal('failed');
      expect(done.reason).to.match(/expired/);
      expect((await world.ledger.balance(wallet)).available).to.equal(5n * USD);
      rpc.proxy.intercept = undefined;
      await expectAgreement(wallet, deposit);
    });
  });
});
