import { expect } from 'chai';
import { decodePaymentResponseHeader } from '@x402/core/http';
import { wrapFetchWithPayment } from '@x402/fetch';
import { createPublicClient, http, parseAbi, type Address } from 'viem';
import { privateKeyToAccount } from 'viem/accounts';
import { x402Client } from '@x402/core/client';
import { ExactEvmScheme as ExactEvmClient } from '@x402/evm/exact/client';
import { BANNER_END, type parseBanner, type startSigil } from '../support/cli.ts';
import { ProbeWorld } from '../gateway/support.ts';

const balanceAbi = parseAbi(['function balanceOf(address account) view returns (uint256)']);

/**
 * Issue 11's "done when", as a new user tries it: `sigil up`, then the official `@x402/fetch` client
 * with the dev wallet `sigil up` printed pays for a tool call; a failing call costs nothing.
 */
describe('payments after sigil up, with the printed dev wallet', function () {
  this.timeout(120_000);
  let world: ProbeWorld;
  let up: Awaited<ReturnType<typeof startSigil>>;
  let banner: ReturnType<typeof parseBanner>;
  let gatewayUrl: string;

  before(async () => {
    world = await ProbeWorld.start();
    ({ up, banner, gatewayUrl } = await world.sigilUp(BANNER_END));
  });
  after(async () => {
    up?.child.kill('SIGINT');
    await up?.exited;
    await world?.stop();
  });

  const balanceOf = (account: Address) =>
    createPublicClient({ transport: http(banner.rpcUrl) }).readContract({
      address: banner.token,
      abi: balanceAbi,
      functionName: 'balanceOf',
      args: [account],
    });

  function payingFetch(): typeof fetch {
    const network = `eip155:${banner.chainId}` as const;
    const client = new x402Client()
      .register(network, new ExactEvmClient(privateKeyToAccount(banner.key as `0x${string}`)))
      .setSpendControls({ allowedAssets: [{ network, asset: banner.token }] });
    return wrapFetchWithPayment(fetch, client);
  }

  const call = (tool: string, args: Record<string, unknown>) =>
    payingFetch()(`${gatewayUrl}/api/servers/probe/tools/${tool}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ arguments: args }),
    });

  it('a paid tool call moves exactly 500 base units from the printed payer to the treasury', async () => {
    const [payerBefore, treasuryBefore] = await Promise.all([
      balanceOf(banner.payer),
      balanceOf(banner.treasury),
    ]);
    const res = await call('echo', { message: 'paid after sigil up' });
    expect(res.status, await res.clone().text()).to.equal(200);
    expect(((await res.json()) as { content: { text: string }[] }).content[0]!.text).to.equal(
      'paid after sigil up',
    );
    const receipt = decodePaymentResponseHeader(res.headers.get('payment-response') as string);
    expect(receipt).to.include({ success: true, payer: banner.payer });
    expect(await balanceOf(banner.payer)).to.equal(payerBefore - 500n);
    expect(await balanceOf(banner.treasury)).to.equal(treasuryBefore + 500n);
  });

  it('a failing tool call leaves the payer’s balance unchanged', async () => {
    const before = await balanceOf(banner.payer);
    const res = await call('fail', { message: 'no charge' });
    expect(res.status).to.equal(200);
    expect(((await res.json()) as { isError?: boolean }).isError).to.equal(true);
    expect(res.headers.get('payment-response')).to.equal(null);
    expect(await balanceOf(banner.payer)).to.equal(before);
  });
});
