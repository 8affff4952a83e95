import { expect } from 'chai';
import { decodePaymentResponseHeader } from '@x402/core/http';
import { wrapFetchWithPayment } from '@x402/fetch';
import { privateKeyToAccount } from 'viem/accounts';
import { x402Client } from '@x402/core/client';
import { ExactEvmScheme as ExactEvmClient } from '@x402/evm/exact/client';
import { BANNER_END } from '../../../support/cli.ts';
import { sigilUpSuite } from '../../../support/sigil-up-suite.ts';

/**
 * Issue 11's "done when", as a new user tries it: `sigil up`, then the official `@x402/fetch` client
 * with the dev wallet `sigil up` printed pays for a tool call; a failing call costs nothing.
 */
describe('payments after sigil up, with the printed dev wallet', function () {
  this.timeout(120_000);
  const sigil = sigilUpSuite(BANNER_END);

  function payingFetch(): typeof fetch {
    const network = `eip155:${sigil.banner.chainId}` as const;
    const client = new x402Client()
      .register(network, new ExactEvmClient(privateKeyToAccount(sigil.banner.key as `0x${string}`)))
      .setSpendControls({ allowedAssets: [{ network, asset: sigil.banner.token }] });
    return wrapFetchWithPayment(fetch, client);
  }

  const call = (tool: string, args: Record<string, unknown>) =>
    payingFetch()(`${sigil.gatewayUrl}/api/servers/probe/tools/${tool}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ arguments: args }),
    });

  it('a paid tool call moves exactly 500 base units from the printed payer to the treasury', async () => {
    const [payerBefore, treasuryBefore] = await Promise.all([
      sigil.balanceOf(sigil.banner.payer),
      sigil.balanceOf(sigil.banner.treasury),
    ]);
    const res = await call('echo', { message: 'paid after sigil up' });
    expect(res.status, await res.clone().text()).to.equal(200);
    expect(((await res.json()) as { content: { text: string }[] }).content[0]!.text).to.equal(
      'paid after sigil up',
    );
    const receipt = decodePaymentResponseHeader(res.headers.get('payment-response') as string);
    expect(receipt).to.include({ success: true, payer: sigil.banner.payer });
    expect(await sigil.balanceOf(sigil.banner.payer)).to.equal(payerBefore - 500n);
    expect(await sigil.balanceOf(sigil.banner.treasury)).to.equal(treasuryBefore + 500n);
  });

  it('a failing tool call leaves the payer’s balance unchanged', async () => {
    const before = await sigil.balanceOf(sigil.banner.payer);
    const res = await call('fail', { message: 'no charge' });
    expect(res.status).to.equal(200);
    expect(((await res.json()) as { isError?: boolean }).isError).to.equal(true);
    expect(res.headers.get('payment-response')).to.equal(null);
    expect(await sigil.balanceOf(sigil.banner.payer)).to.equal(before);
  });
});
