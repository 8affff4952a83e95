import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { expect } from 'chai';
import type { FacilitatorClient } from '@x402/core/server';
import { createPublicClient, defineChain, http } from 'viem';
import { configSchema, X402EvmRail } from '../../plugins/payments/x402-evm/index.ts';
import { createFacilitator } from '../../plugins/payments/x402-evm/facilitator.ts';
import { startDevChain, type DevChain } from '../support/chain.ts';
import { balances, payingClient, railPlugin } from './support.ts';

const readBody = (req: IncomingMessage) =>
  new Promise<string>((resolve) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => resolve(body));
  });

/** A facilitator as a remote one looks on the wire (x402's /verify, /settle, /supported), counting its calls. */
async function serveFacilitator(
  facilitator: FacilitatorClient,
): Promise<{ url: string; calls: string[]; server: Server }> {
  const calls: string[] = [];
  const server = createServer((req, res) => {
    void (async () => {
      const send = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      calls.push(`${req.method} ${req.url}`);
      if (req.method === 'GET' && req.url?.endsWith('/supported'))
        return send(200, await facilitator.getSupported());
      const body = JSON.parse(await readBody(req)) as { paymentPayload: never; paymentRequirements: never };
      if (req.url?.endsWith('/verify')) {
        const verified = await facilitator.verify(body.paymentPayload, body.paymentRequirements);
        return send(verified.isValid ? 200 : 400, verified);
      }
      if (req.url?.endsWith('/settle'))
        return send(200, await facilitator.settle(body.paymentPayload, body.paymentRequirements));
      send(404, {});
    })();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/x402`, calls, server };
}

describe('payments: facilitators', function () {
  this.timeout(60_000);
  let chain: DevChain;
  before(async () => {
    chain = await startDevChain();
  });
  after(() => chain?.stop());

  it('refuses a remote facilitator without a URL: x402’s public default is never used', () => {
    const { plugin } = railPlugin(chain);
    for (const facilitator of [
      { kind: 'remote' },
      { kind: 'remote', url: '' },
      { kind: 'remote', url: 'ftp://x' },
    ]) {
      const parsed = configSchema.safeParse({ ...plugin.options, facilitator });
      expect(parsed.success, JSON.stringify(facilitator)).to.equal(false);
    }
  });

  it('verifies and settles through a remote facilitator at the configured URL; a refusal there is a reason, not a crash', async () => {
    const { plugin, payTo } = railPlugin(chain);
    const builtin = configSchema.parse(plugin.options);
    const definition = defineChain({
      id: chain.chainId,
      name: 'dev',
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [chain.rpcUrl] } },
    });
    const remote = await serveFacilitator(
      createFacilitator(
        builtin,
        definition,
        createPublicClient({ chain: definition, transport: http(chain.rpcUrl) }),
      ),
    );
    try {
      const rail = new X402EvmRail(
        configSchema.parse({ ...plugin.options, facilitator: { kind: 'remote', url: remote.url } }),
      );
      expect(rail.terms().facilitator).to.equal('remote');
      const payload = await payingClient(chain).createPaymentPayload(
        rail.paymentRequired({ url: 'mcp://tool/probe__echo', description: 'echo' }) as never,
      );
      const balanceOf = balances(chain);
      const verified = await rail.verify(payload);
      expect(verified.valid).to.equal(true);
      if (!verified.valid) return;
      const settled = await rail.settle(verified.payment);
      expect(settled.status, JSON.stringify(settled)).to.equal('settled');
      expect(await balanceOf(payTo)).to.equal(500n);
      expect(remote.calls).to.include.members(['POST /x402/verify', 'POST /x402/settle']);

      const replay = await rail.verify(payload);
      expect(replay).to.deep.include({ valid: false, reason: 'invalid_exact_evm_nonce_already_used' });
      // Settling again answers settled (the chain has it), moving nothing more.
      expect((await rail.settle(verified.payment)).status).to.equal('settled');
      expect(await balanceOf(payTo)).to.equal(500n);
      await rail.stop();
    } finally {
      remote.server.close();
    }
  });
});
