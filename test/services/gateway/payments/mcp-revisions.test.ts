import { ProtocolError, type Client as ClientV2 } from '@modelcontextprotocol/client';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import { PROOF_META_KEY } from '../../../../services/gateway/proofs.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { mcpClient, mcpClientV2, textOf, walletToken } from '../support.ts';
import {
  PAYMENT,
  RECEIPT,
  anvilWorld,
  paidGateway,
  payingClient,
  refusal,
  stopSharedProbeWorld,
  type PaidGateway,
} from './support.ts';

after(stopSharedProbeWorld); // root level: once every file has used the shared probe world

/** One client of each SDK, as a new user connects it: its own wallet token and session. */
interface Connected {
  client: Client | ClientV2;
  /** What a refused call throws. */
  refused: new (...args: never[]) => McpError | ProtocolError;
}

const CLIENTS: Record<string, (url: string, token: string) => Promise<Connected>> = {
  'an SDK v2 client at 2026-07-28': async (url, token) => {
    const client = await mcpClientV2(url, token, 'done-when');
    expect(client.getProtocolEra()).to.equal('modern');
    return { client, refused: ProtocolError };
  },
  'an SDK 1.x client at 2025-11-25': async (url, token) => ({
    client: await mcpClient(url, token, 'done-when'),
    refused: McpError,
  }),
};

/**
 * Issue 28, "Done when": an SDK v2 client and an SDK 1.x client list, enable and call tools, free (the
 * meta-tools) and paid (the probe server's, with x402 on anvil), on the same running gateway.
 */
describe('MCP 2026-07-28 and 2025-11-25 on one paid gateway: SDK v2 and SDK 1.x clients list, enable and call free and paid tools', function () {
  this.timeout(120_000);
  const anvil = anvilWorld();

  describeEachDatabase('one gateway', (database) => {
    let gateway: PaidGateway;
    before(async () => {
      gateway = await paidGateway(anvil.world, anvil.chain, database, {
        facilitatorIndex: anvil.nextFacilitator(),
      });
    });
    after(() => gateway?.stop());

    for (const [name, connect] of Object.entries(CLIENTS)) {
      it(`${name}: lists, calls a free meta-tool, enables the probe, pays for probe__echo`, async () => {
        const { client, refused } = await connect(
          `${gateway.url}/mcp`,
          (await walletToken(gateway.url)).token,
        );
        try {
          const names = async () => (await client.listTools()).tools.map((tool) => tool.name);
          expect(await names())
            .to.include('gateway_search_servers')
            .and.not.include('probe__echo');

          const found = (await client.callTool({
            name: 'gateway_search_servers',
            arguments: { query: 'probe' },
          })) as CallToolResult;
          expect(found.isError, textOf(found)).to.not.equal(true);
          expect(textOf(found)).to.include('probe');
          expect(found._meta?.[RECEIPT], 'a free call').to.equal(undefined);

          const enabled = (await client.callTool({
            name: 'gateway_enable_server',
            arguments: { serverId: 'probe' },
          })) as CallToolResult;
          expect(enabled.isError, textOf(enabled)).to.not.equal(true);
          expect(await names()).to.include('probe__echo');

          const unpaid = await refusal(
            client.callTool({ name: 'probe__echo', arguments: { message: 'unpaid' } }),
            refused,
          );
          expect(unpaid.code).to.equal(402);
          const payment = await payingClient(anvil.chain, gateway.payer).createPaymentPayload(
            unpaid.data as PaymentRequired,
          );
          const paid = (await client.callTool({
            name: 'probe__echo',
            arguments: { message: name },
            _meta: { [PAYMENT]: payment },
          })) as CallToolResult;
          expect(textOf(paid)).to.equal(name);
          expect(paid._meta?.[RECEIPT]).to.include({ success: true, payer: gateway.payer.address });
          expect(paid._meta?.[PROOF_META_KEY]).to.include.keys('requestHash', 'responseHash');
        } finally {
          await client.close();
        }
      });
    }

    it('the books balance: each client paid once', async () => {
      expect((await gateway.expectBalanced()).settled).to.equal(1000n);
    });
  });
});
