import { decodePaymentRequiredHeader } from '@x402/core/http';
import type { PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import { TEST_DATABASES } from '../../../support/kernel.ts';
import { mcpClient, walletToken } from '../support.ts';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import {
  paidGateway,
  payingClient,
  sharedProbeWorld,
  stopSharedProbeWorld,
  type PaidGateway,
} from './support.ts';

after(stopSharedProbeWorld); // root level: once every file has used the shared probe world

const PUBLIC_URL = 'https://gateway.example.test/sigil';

/** A proof of the right shape: POST /api/verify asks its payment before it reads the proof. */
const madeUpProof = {
  version: 'sigil-proof/1',
  id: 'made-up',
  gateway: { codeHash: 'x', gitCommit: 'x' },
  server: { id: 'probe', package: 'x', version: 'x', registry: 'npm', digest: 'x' },
  tool: 'echo',
  canonicalization: 'RFC8785',
  requestHash: 'x',
  responseHash: 'x',
  timestamp: new Date(0).toISOString(),
  tee: { enabled: false, platform: 'none' },
  keySource: 'ephemeral',
  secretNames: [],
  fieldMacs: {},
  signature: 'x',
};

/** What a payer reads in a 402: the resource under the configured public URL, a code and one sentence. */
describe('payments: what a refused payer reads (anvil)', function () {
  this.timeout(120_000);
  let chain: DevChain;
  let gateway: PaidGateway;

  before(async () => {
    chain = await startDevChain();
    gateway = await paidGateway(await sharedProbeWorld(), chain, TEST_DATABASES[0]!, {
      facilitatorIndex: 3,
      gateway: { publicUrl: PUBLIC_URL },
    });
  });
  after(async () => {
    await gateway?.stop();
    await chain?.stop();
  });

  const requiredOf = (res: Response): PaymentRequired =>
    decodePaymentRequiredHeader(res.headers.get('payment-required') as string);

  it('POST /api/verify names its resource under gateway.publicUrl, whatever the request says (no Origin, another Host)', async () => {
    const port = new URL(gateway.url).port;
    const variants: Record<string, string>[] = [{}, { host: `localhost:${port}` }];
    for (const headers of variants) {
      const res = await fetch(`${gateway.url}/api/verify`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify({ proof: madeUpProof }),
      });
      expect(res.status).to.equal(402);
      expect(requiredOf(res).resource.url).to.equal(`${PUBLIC_URL}/api/verify`);
    }
  });

  it('a REST tool call names its route under gateway.publicUrl; an MCP call names the tool', async () => {
    const rest = await gateway.callRest('echo', { message: 'unpaid' });
    expect(rest.status).to.equal(402);
    expect(requiredOf(rest).resource.url).to.equal(`${PUBLIC_URL}/api/servers/probe/tools/echo`);
    const { amount } = requiredOf(rest).accepts[0] as { amount: string };
    expect(((await rest.json()) as { message: string }).message).to.match(
      new RegExp(`^Payment required: this call costs ${amount} base units of .+ on eip155:\\d+$`),
    );
    const client = await mcpClient(`${gateway.url}/mcp/server/probe`);
    try {
      const err = await client.callTool({ name: 'echo', arguments: { message: 'unpaid' } }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(err).to.be.instanceOf(McpError);
      expect(((err as McpError).data as PaymentRequired).resource.url).to.equal('mcp://tool/probe__echo');
    } finally {
      await client.close();
    }
  });

  it('a payment replayed after it settled: 402 with the code payment_already_used and one sentence, no node error dump', async () => {
    const payment = await payingClient(chain, gateway.payer).createPaymentPayload(await gateway.required());
    expect((await gateway.callRest('echo', { message: 'once' }, payment)).status).to.equal(200);
    const replay = await gateway.callRest('echo', { message: 'again' }, payment);
    expect(replay.status).to.equal(402);
    const body = (await replay.json()) as { code: string; message: string; details: { reason: string } };
    expect(body.code).to.equal('payment_required');
    expect(body.details.reason).to.equal('payment_already_used');
    expect(requiredOf(replay).error).to.equal('payment_already_used');
    expect(body.message).to.match(/^Payment refused: [^\n]+$/);
    expect(body.message.length).to.be.below(160);
    expect(body.message).to.not.match(/Contract Call|reverted|viem|0x[0-9a-fA-F]{8}/);

    // Over MCP the same payment gets the same code, and the JSON-RPC message is the same sentence.
    const { token } = await walletToken(gateway.url);
    const client = await mcpClient(`${gateway.url}/mcp/server/probe`, token);
    try {
      const err = await client
        .callTool({ name: 'echo', arguments: { message: 'again' }, _meta: { 'x402/payment': payment } })
        .then(
          () => undefined,
          (error: unknown) => error,
        );
      expect(err).to.be.instanceOf(McpError);
      expect(((err as McpError).data as PaymentRequired).error).to.equal('payment_already_used');
      expect((err as McpError).message).to.not.match(/Contract Call|reverted|viem|\n/);
    } finally {
      await client.close();
    }
  });
});
