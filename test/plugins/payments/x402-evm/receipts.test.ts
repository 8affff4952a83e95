import { expect } from 'chai';
import {
  createPublicClient,
  createTestClient,
  createWalletClient,
  http,
  WaitForTransactionReceiptTimeoutError,
  type Hex,
  type PublicClient,
} from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { getTransactionCount } from 'viem/actions';
import { ReceiptWatch } from '../../../../plugins/payments/x402-evm/receipts.ts';
import { chainBehindProxy, devAccountKey, eventually } from '../../../services/gateway/payments/support.ts';

/**
 * The receipts of settlements sent ahead (answerAfter "broadcast"): every waiting settlement is
 * found by reading each new block's receipts once, not by asking for each receipt on every block.
 */
describe('payments-x402-evm: receipts of settlements sent ahead, read by block (anvil)', function () {
  this.timeout(60_000);
  const world = chainBehindProxy();
  let watch: ReceiptWatch;
  const account = privateKeyToAccount(devAccountKey(6));

  const setUp = () => {
    const { chain, proxy } = world;
    const client = createPublicClient({ transport: http(proxy.url) }) as PublicClient;
    watch = new ReceiptWatch(client, 20);
    const control = createTestClient({ mode: 'anvil', transport: http(chain.rpcUrl) });
    const wallet = createWalletClient({ account, transport: http(chain.rpcUrl) });
    const send = (nonce: number): Promise<Hex> =>
      wallet.sendTransaction({ chain: null, to: account.address, value: 1n, nonce, gas: 21_000n });
    const nextNonce = () => getTransactionCount(control, { address: account.address, blockTag: 'pending' });
    return { proxy, control, send, nextNonce };
  };
  afterEach(async () => {
    watch.stop();
    await createTestClient({ mode: 'anvil', transport: http(world.chain.rpcUrl) }).setAutomine(true);
  });

  it('twenty settlements waiting through empty blocks: one read a block, not one a settlement', async () => {
    const { proxy, control, send, nextNonce } = setUp();
    await control.setAutomine(false);
    const first = await nextNonce();
    // Held behind a gap (the first nonce not sent yet): they stay in the pool while blocks are mined.
    const hashes = await Promise.all(Array.from({ length: 20 }, (_, i) => send(first + 1 + i)));
    const receipts = Promise.all(hashes.map((hash) => watch.wait(hash, 30_000)));
    await eventually('the first look', async () => proxy.count('eth_blockNumber') > 0);
    const asked = () => proxy.count('eth_getTransactionReceipt');
    await eventually('the waits asked once each', async () => asked() >= 20);
    for (let block = 0; block < 5; block++) {
      const reads = proxy.count('eth_getBlockReceipts');
      await control.mine({ blocks: 1 });
      await eventually('the new block read', async () => proxy.count('eth_getBlockReceipts') > reads);
    }
    const askedWhileWaiting = asked();
    expect(askedWhileWaiting, 'receipts asked for, five blocks later').to.be.at.most(40);

    await send(first);
    await control.mine({ blocks: 1 });
    const found = await receipts;
    expect(found.map((receipt) => receipt.transactionHash)).to.deep.equal(hashes);
    expect(found.every((receipt) => receipt.status === 'success')).to.equal(true);
    // The block's receipts are the receipts viem reads one by one.
    const direct = createPublicClient({ transport: http(world.chain.rpcUrl) });
    expect(found[7]).to.deep.equal(await direct.getTransactionReceipt({ hash: hashes[7] as Hex }));
    expect(asked(), 'no receipt asked for by hash once blocks are read').to.equal(askedWhileWaiting);
  });

  it('a settlement mined before it is awaited is found at once, by each of its waits', async () => {
    const { send, nextNonce } = setUp();
    const hash = await send(await nextNonce());
    const [receipt, again] = await Promise.all([watch.wait(hash, 30_000), watch.wait(hash, 30_000)]);
    expect(receipt.transactionHash).to.equal(hash);
    expect(again, 'awaited twice, answered to both').to.equal(receipt);
  });

  it('a node without eth_getBlockReceipts: each waiting receipt is asked for instead', async () => {
    const { proxy, control, send, nextNonce } = setUp();
    proxy.intercept = (methods) =>
      methods.includes('eth_getBlockReceipts') ? 'method-not-found' : 'forward';
    await control.setAutomine(false);
    const first = await nextNonce();
    const hash = await send(first + 1);
    const receipt = watch.wait(hash, 30_000);
    await eventually('the first look', async () => proxy.count('eth_blockNumber') > 0);
    await control.mine({ blocks: 1 });
    await eventually('the block read refused', async () => proxy.count('eth_getBlockReceipts') > 0);
    await send(first);
    await control.mine({ blocks: 1 });
    expect((await receipt).transactionHash).to.equal(hash);
  });

  it('a settlement never mined: a timeout, as viem’s wait answers', async () => {
    setUp();
    const never = `0x${'ab'.repeat(32)}` as Hex;
    const err = await watch.wait(never, 300).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(err).to.be.instanceOf(WaitForTransactionReceiptTimeoutError);
  });
});
