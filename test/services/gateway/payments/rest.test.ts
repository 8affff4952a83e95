import { expect } from 'chai';
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http';
import { wrapFetchWithPayment } from '@x402/fetch';
import type { Address } from 'viem';
import type { Serving } from '../../../../services/serve.ts';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import { TEST_DATABASES } from '../../../support/kernel.ts';
import { ProbeWorld } from '../support.ts';
import { balances, payingClient, railPlugin } from './support.ts';

/** REST tool calls paid with x402 on the dev chain, by the official `@x402/fetch` client. */
describe('payments: REST tool calls with x402 on anvil', function () {
  this.timeout(120_000);
  let world: ProbeWorld;
  let chain: DevChain;
  let serving: Serving & { url: string };
  let payTo: Address;
  let balanceOf: (account: Address) => Promise<bigint>;

  before(async () => {
    [world, chain] = await Promise.all([ProbeWorld.start(), startDevChain()]);
    const rail = railPlugin(chain);
    payTo = rail.payTo;
    serving = await world.gateway(TEST_DATABASES[0]!, {}, { plugins: [rail.plugin] });
    balanceOf = balances(chain);
  });
  after(async () => {
    await serving?.stop();
    await Promise.all([world?.stop(), chain?.stop()]);
  });

  const echoUrl = () => `${serving.url}/api/servers/probe/tools/echo`;
  const post = (url: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });

  it('answers an unpaid call with 402 and PAYMENT-REQUIRED: 500 base units of the token to payTo', async () => {
    const res = await post(echoUrl(), { arguments: { message: 'unpaid' } });
    expect(res.status).to.equal(402);
    const required = decodePaymentRequiredHeader(res.headers.get('payment-required') as string);
    expect(required.x402Version).to.equal(2);
    expect(required.accepts[0]).to.deep.include({
      scheme: 'exact',
      network: 'eip155:8453',
      amount: '500',
      asset: chain.token.address,
      payTo,
    });
    const body = (await res.json()) as { code: string; hint: string };
    expect(body.code).to.equal('payment_required');
    // How any x402 client pays; the dev chain's one-liners only where sigil up runs one (test/examples).
    expect(body.hint).to.match(/^Pay with x402: .*PAYMENT-SIGNATURE/);
    expect(body.hint).to.not.include('examples/');
  });

  it('@x402/fetch pays and calls: the payer loses exactly 500 units, payTo gains them, PAYMENT-RESPONSE names the transaction', async () => {
    const payer = chain.accounts.payer.address;
    const [payerBefore, payeeBefore] = await Promise.all([balanceOf(payer), balanceOf(payTo)]);
    const fetchWithPay = wrapFetchWithPayment(fetch, payingClient(chain));
    const res = await fetchWithPay(echoUrl(), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ arguments: { message: 'paid' } }),
    });
    expect(res.status).to.equal(200);
    const result = (await res.json()) as { content: { text: string }[] };
    expect(result.content[0]!.text).to.equal('paid');
    const receipt = decodePaymentResponseHeader(res.headers.get('payment-response') as string);
    expect(receipt).to.include({ success: true, network: 'eip155:8453', payer });
    expect(receipt.transaction).to.match(/^0x[0-9a-f]{64}$/);
    expect(await balanceOf(payer)).to.equal(payerBefore - 500n);
    expect(await balanceOf(payTo)).to.equal(payeeBefore + 500n);
  });

  it('GET /api/payments/config is free and states the terms', async () => {
    const res = await fetch(`${serving.url}/api/payments/config`);
    expect(res.status).to.equal(200);
    expect(await res.json()).to.deep.include({
      enabled: true,
      network: 'eip155:8453',
      chainId: 8453,
      pricePerCall: '500',
      priceUsd: '0.0005',
      payTo,
      scheme: 'exact',
    });
  });
});
