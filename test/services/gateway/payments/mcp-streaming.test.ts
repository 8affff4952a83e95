import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { McpError, type Progress } from '@modelcontextprotocol/sdk/types.js';
import type { PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import { PROOF_META_KEY } from '../../../../services/gateway/proofs.ts';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { EVERYTHING } from '../../../registries/npm/support.ts';
import { everythingEntry, mcpClient, ProbeWorld, textOf, walletToken } from '../support.ts';
import { PAYMENT, RECEIPT, paidGateway, payingClient, type PaidGateway } from './support.ts';

/**
 * A paid call answered as an event stream pays as a JSON one does: refused unpaid before anything
 * runs, settled once before the result leaves, the receipt and the proof in the result's _meta.
 */
describe('payments: a paid MCP call whose answer is an event stream (progress)', function () {
  this.timeout(180_000);
  let world: ProbeWorld;
  let chain: DevChain;

  before(async () => {
    [world, chain] = await Promise.all([
      ProbeWorld.start({
        packages: [{ spec: `${EVERYTHING.name}@${EVERYTHING.version}` }],
        servers: [everythingEntry],
      }),
      startDevChain(),
    ]);
  });
  after(async () => {
    await chain?.stop();
    await world?.stop();
  });

  let facilitatorIndex = 3;

  describeEachDatabase('one gateway', (database) => {
    let gateway: PaidGateway;
    let client: Client;

    before(async () => {
      gateway = await paidGateway(world, chain, database, { facilitatorIndex: facilitatorIndex++ });
      client = await mcpClient(`${gateway.url}/mcp`, (await walletToken(gateway.url)).token, 'paid-stream');
      // The first enable installs and verifies the server: longer than the SDK's default 60 s wait.
      const enabled = await client.callTool(
        { name: 'gateway_enable_server', arguments: { serverId: 'everything' } },
        undefined,
        { timeout: 170_000 },
      );
      expect(enabled.isError, textOf(enabled)).to.not.equal(true);
    });
    after(async () => {
      await client?.close();
      await gateway?.stop();
    });

    const longRun = (reports: Progress[], meta?: Record<string, unknown>) =>
      client.callTool(
        {
          name: 'everything__trigger-long-running-operation',
          arguments: { duration: 0.2, steps: 2 },
          ...(meta ? { _meta: meta } : {}),
        },
        undefined,
        { onprogress: (progress) => reports.push(progress) },
      );

    it('unpaid: a 402 before the tool runs (no progress); paid: progress, then the result with receipt and proof, charged once', async () => {
      const unpaidReports: Progress[] = [];
      const refused = await longRun(unpaidReports).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(refused).to.be.instanceOf(McpError);
      expect((refused as McpError).code).to.equal(402);
      expect(unpaidReports).to.deep.equal([]);

      const payment = await payingClient(chain, gateway.payer).createPaymentPayload(
        (refused as McpError).data as PaymentRequired,
      );
      const reports: Progress[] = [];
      const result = await longRun(reports, { [PAYMENT]: payment });
      expect(reports).to.deep.equal([
        { progress: 1, total: 2 },
        { progress: 2, total: 2 },
      ]);
      expect(textOf(result)).to.match(/^Long running operation completed/);
      const receipt = result._meta?.[RECEIPT] as Record<string, unknown>;
      expect(receipt).to.include({ success: true, payer: gateway.payer.address });
      expect(result._meta?.[PROOF_META_KEY]).to.be.an('object');
      const { settled, rows } = await gateway.expectBalanced();
      expect(settled).to.equal(500n);
      expect(rows.map((row) => [row.state, row.transaction])).to.deep.equal([
        ['settled', receipt.transaction],
      ]);
    });
  });
});
