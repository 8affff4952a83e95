import type { PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import {
  createPublicClient,
  createTestClient,
  createWalletClient,
  encodeFunctionData,
  http,
  isAddressEqual,
  parseAbi,
  parseSignature,
  parseTransaction,
  recoverTransactionAddress,
  type Address,
  type Hex,
  type TransactionSerialized,
  zeroAddress,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import type { SettleOutcome, VerifiedPayment } from '@sigil/plugin-api';
import { configSchema, X402EvmRail } from '../../../../plugins/payments/x402-evm/index.ts';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import {
  balances,
  chainBehindProxy,
  devAccountKey,
  eventually,
  payingClient,
  railPlugin,
  railThroughProxy,
  sendsTransaction,
} from '../../../services/gateway/payments/support.ts';
import { ManualClock, systemClock } from '../../../../core/clock.ts';
import { getTransactionCount } from 'viem/actions';

/**
 * The built-in facilitator's transaction nonces: each rail counts its own. Two rails in one process
 * (a test run, a conformance run, a dev chain started again) may settle from the same account on
 * chains that share a chain id but not a history.
 */
describe('payments-x402-evm: transaction nonces of the built-in facilitator, on anvil', function () {
  this.timeout(60_000);
  let chains: DevChain[] = [];

  before(async () => {
    chains = await Promise.all([startDevChain(), startDevChain()]);
  });
  after(async () => {
    await Promise.all(chains.map((chain) => chain.stop()));
  });

  it('two rails on two fresh chains with the same chain id, settling from the same account: both settle at once', async () => {
    for (const chain of chains) {
      const { plugin, payTo } = railPlugin(chain, {
        facilitator: { kind: 'builtin', privateKey: devAccountKey(9) },
      });
      const rail = new X402EvmRail(configSchema.parse(plugin.options), { clock: systemClock });
      const required = rail.paymentRequired({
        url: 'test://nonces',
        description: 'nonces',
      }) as PaymentRequired;
      const verified = await rail.verify(await payingClient(chain).createPaymentPayload(required));
      if (!verified.valid) throw new Error(`not verified: ${verified.reason}`);
      // A transaction sent with a nonce the chain has not reached never mines: settle would hang.
      const outcome = await Promise.race([
        rail.settle(verified.payment),
        new Promise<SettleOutcome>((resolve) =>
          setTimeout(
            () => resolve({ status: 'retry', reason: 'hung', message: 'no receipt in 10 s' }),
            10_000,
          ),
        ),
      ]);
      await rail.stop();
      expect(outcome.status, `chain ${chain.rpcUrl}: ${JSON.stringify(outcome)}`).to.equal('settled');
      expect(await balances(chain)(payTo)).to.equal(500n);
    }
  });
});

/**
 * A settlement sent by x402's path (a payment this process did not verify: after a restart, on
 * another replica) whose transaction another of its account's transactions replaced in the pool (the
 * same nonce, higher fees; as a nonce counted again after a failed send can do). viem answers the wait
 * for a replaced transaction with its replacement's receipt: another payment's transfer from the same
 * payer to the same payee passes every check of that receipt. It must not settle this payment.
 */
describe('payments-x402-evm: a settlement replaced in the pool by another transfer (anvil)', function () {
  this.timeout(60_000);
  const world = chainBehindProxy();

  it("is not settled by the replacement's receipt; once its authorization is used by its own transfer, it is", async () => {
    const { chain, proxy } = world;
    const { plugin, payTo, key } = railThroughProxy(world, 8);
    const config = configSchema.parse({ ...plugin.options, pollingIntervalMs: 20 });
    const verifier = new X402EvmRail(config, { clock: systemClock });
    const settler = new X402EvmRail(config, { clock: systemClock });
    const required = verifier.paymentRequired({ url: 'test://replaced', description: 'replaced' });
    const client = payingClient(chain);
    const [own, other] = await Promise.all([
      client.createPaymentPayload(required as PaymentRequired),
      client.createPaymentPayload(required as PaymentRequired),
    ]);
    const verified = await verifier.verify(own);
    if (!verified.valid) throw new Error(`not verified: ${verified.reason}`);
    const control = createTestClient({ mode: 'anvil', transport: http(chain.rpcUrl) });
    const account = privateKeyToAccount(key);
    await control.setAutomine(false);

    const settling = settler.settle(verified.payment);
    const sent = await eventually('the settlement in the pool', async () => {
      const pool = await control.getTxpoolContent();
      const mine = Object.entries(pool.pending).find(([from]) =>
        isAddressEqual(from as Address, account.address),
      );
      return mine && Object.values(mine[1])[0];
    });
    // viem has read the transaction it waits for: only then can it tell that another replaced it.
    await eventually(
      'the settlement read while pending',
      async () => proxy.count('eth_getTransactionByHash') > 0,
    );
    // The other payment's transfer, from the same account with the same nonce and higher fees.
    const { authorization, signature } = other.payload as {
      authorization: {
        from: Address;
        to: Address;
        value: string;
        validAfter: string;
        validBefore: string;
        nonce: Hex;
      };
      signature: Hex;
    };
    const { v, r, s } = parseSignature(signature);
    const wallet = createWalletClient({ account, transport: http(chain.rpcUrl) });
    await wallet.sendTransaction({
      chain: null,
      to: chain.token.address,
      data: encodeFunctionData({
        abi: parseAbi([
          'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
        ]),
        functionName: 'transferWithAuthorization',
        args: [
          authorization.from,
          authorization.to,
          BigInt(authorization.value),
          BigInt(authorization.validAfter),
          BigInt(authorization.validBefore),
          authorization.nonce,
          Number(v),
          r,
          s,
        ],
      }),
      nonce: Number(sent.nonce),
      gas: 200_000n,
      maxFeePerGas: BigInt(sent.maxFeePerGas ?? sent.gasPrice) * 3n,
      maxPriorityFeePerGas: BigInt(sent.maxPriorityFeePerGas ?? sent.gasPrice) * 3n,
    });
    await control.mine({ blocks: 1 });

    const outcome = await settling;
    expect(outcome.status, JSON.stringify(outcome)).to.not.equal('settled');
    expect(await balances(chain)(payTo), 'only the other payment moved').to.equal(500n);

    await control.setAutomine(true);
    const settled = await settler.settle(verified.payment);
    expect(settled.status, JSON.stringify(settled)).to.equal('settled');
    expect(await balances(chain)(payTo)).to.equal(1000n);
    await Promise.all([verifier.stop(), settler.stop()]);
  });
});

/**
 * Nonces of settlements signed ahead (while the host writes the `settling` mark) are not yet known to
 * the chain. A send refused meanwhile has the account's count read again from the chain, which then
 * names a nonce such a transaction holds: a later settlement took it too, and one of the two was
 * refused or replaced the other (a settlement delayed to the retry worker). Held nonces are skipped.
 */
describe('payments-x402-evm: nonces held by settlements signed ahead, after a refused send (anvil)', function () {
  this.timeout(60_000);
  const world = chainBehindProxy();

  it('every settlement transaction takes a nonce of its own, and every payment settles at once', async () => {
    const { chain, proxy } = world;
    const { plugin, payTo, key } = railThroughProxy(world, 7);
    const rail = new X402EvmRail(configSchema.parse(plugin.options), { clock: systemClock });
    const required = rail.paymentRequired({ url: 'test://held', description: 'held' }) as PaymentRequired;
    const client = payingClient(chain);
    const payments = [];
    for (let i = 0; i < 3; i++) {
      const verified = await rail.verify(await client.createPaymentPayload(required));
      if (!verified.valid) throw new Error(`not verified: ${verified.reason}`);
      payments.push(verified.payment);
    }
    const [first, second, third] = payments as [VerifiedPayment, VerifiedPayment, VerifiedPayment];

    // Two settlements signed ahead; the first one's send is refused (its connection cut).
    let refused = false;
    proxy.intercept = (methods) =>
      sendsTransaction(methods) && !refused ? ((refused = true), 'cut') : 'forward';
    rail.prepareSettlement(first);
    rail.prepareSettlement(second);
    const outcomes = [await rail.settle(first)];
    expect(refused, 'the first send was refused').to.equal(true);
    // Signed after the count was read again, while the second's transaction still waits to be sent;
    // the two calls end together.
    rail.prepareSettlement(third);
    outcomes.push(...(await Promise.all([rail.settle(third), rail.settle(second)])));
    await rail.stop();

    expect(
      outcomes.map((outcome) => outcome.status),
      JSON.stringify(outcomes),
    ).to.deep.equal(['settled', 'settled', 'settled']);
    expect(await balances(chain)(payTo)).to.equal(1500n);
    const settler = privateKeyToAccount(key).address;
    const sent = await Promise.all(
      proxy.transactions.map(async (raw) => ({
        from: await recoverTransactionAddress({ serializedTransaction: raw as TransactionSerialized }),
        nonce: parseTransaction(raw).nonce,
      })),
    );
    const nonces = sent.filter(({ from }) => isAddressEqual(from, settler)).map(({ nonce }) => nonce);
    expect(nonces, 'one transaction a nonce').to.have.lengthOf(new Set(nonces).size);
  });
});

/**
 * A settlement signed ahead whose settle never reaches this rail (it failed before, or another
 * replica's retry worker settles it) would hold its nonce for good, and a count read again after a
 * refused send would then skip it: every later transaction queued behind the gap. Left untaken for a
 * minute, it is discarded and its nonce filled.
 */
describe('payments-x402-evm: a settlement signed ahead and never taken (anvil)', function () {
  this.timeout(60_000);
  const world = chainBehindProxy();

  it('has its nonce filled a minute later, by an empty transaction, and the next settles', async () => {
    const { chain, proxy } = world;
    const { plugin, payTo, key } = railThroughProxy(world, 4);
    const clock = new ManualClock();
    const rail = new X402EvmRail(configSchema.parse(plugin.options), { clock });
    const required = rail.paymentRequired({ url: 'test://untaken', description: 'untaken' });
    const client = payingClient(chain);
    const verify = async () => {
      const verified = await rail.verify(await client.createPaymentPayload(required as PaymentRequired));
      if (!verified.valid) throw new Error(`not verified: ${verified.reason}`);
      return verified.payment;
    };
    const settler = privateKeyToAccount(key).address;
    const first = await getTransactionCount(createPublicClient({ transport: http(chain.rpcUrl) }), {
      address: settler,
    });

    rail.prepareSettlement(await verify()); // its settle never comes
    clock.advance(61_000);
    const next = await verify();
    rail.prepareSettlement(next);
    const outcome = await rail.settle(next);
    await rail.stop();

    expect(outcome.status, JSON.stringify(outcome)).to.equal('settled');
    expect(await balances(chain)(payTo)).to.equal(500n);
    const fill = await eventually('the untaken nonce filled', async () =>
      proxy.transactions
        .map((raw) => parseTransaction(raw))
        .find(
          (tx) =>
            tx.nonce === first && (tx.value ?? 0n) === 0n && isAddressEqual(tx.to ?? zeroAddress, settler),
        ),
    );
    expect(fill.data ?? '0x', 'an empty transaction').to.equal('0x');
  });
});
