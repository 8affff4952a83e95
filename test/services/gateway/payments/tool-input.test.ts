import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import { describeEachDatabase, type TestDatabase } from '../../../support/kernel.ts';
import { hostileEntry, hostilePackage, mcpClient, ProbeWorld, textOf, walletToken } from '../support.ts';
import { PAYMENT, RECEIPT, payingClient, paidGateway, settlementRows, type PaidGateway } from './support.ts';

let facilitatorIndex = 7;

/**
 * What a proof cannot commit to never makes a paid call free: refused before the payment is even
 * verified when it is in the arguments, made well-formed (and so proven and settled) in a result.
 */
describeEachDatabase(
  'payments: tool input and results a proof cannot hold, on anvil',
  (database: TestDatabase) => {
    let world: ProbeWorld;
    let chain: DevChain;
    let gateway: PaidGateway;
    let client: Client;

    before(async function () {
      this.timeout(180_000);
      [world, chain] = await Promise.all([
        ProbeWorld.start({ packages: [hostilePackage], servers: [hostileEntry] }),
        startDevChain(),
      ]);
      gateway = await paidGateway(world, chain, database, { facilitatorIndex: facilitatorIndex++ });
      client = await mcpClient(`${gateway.url}/mcp/server/hostile`, (await walletToken(gateway.url)).token);
    });
    after(async () => {
      await client?.close();
      await gateway?.stop();
      await chain?.stop();
      await world?.stop();
    });

    const outcome = (call: Promise<unknown>): Promise<unknown> =>
      call.then(
        (result) => result,
        (error: unknown) => error,
      );
    /** A payment for one call of `tool`, from the terms of its unpaid call's 402. */
    const paymentFor = async (tool: string): Promise<PaymentPayload> => {
      const unpaid = await outcome(
        client.callTool({ name: tool, arguments: tool === 'record' ? { value: 1 } : {} }),
      );
      expect(unpaid).to.be.instanceOf(McpError);
      expect((unpaid as McpError).code).to.equal(402);
      return payingClient(chain, gateway.payer).createPaymentPayload(
        (unpaid as McpError).data as PaymentRequired,
      );
    };
    const paid = async (tool: string, args: Record<string, unknown>, payment?: PaymentPayload) =>
      (await client.callTool({
        name: tool,
        arguments: args,
        _meta: { [PAYMENT]: payment ?? (await paymentFor(tool)) },
      })) as CallToolResult;

    it('refuses a lone surrogate in paid arguments with -32602 before the payment is used: nothing runs, nothing is recorded', async function () {
      this.timeout(60_000);
      const payment = await paymentFor('record');
      const refused = await outcome(paid('record', { value: 'half \ud800 of a pair' }, payment));
      expect(refused).to.be.instanceOf(McpError);
      expect((refused as McpError).code).to.equal(-32602);
      expect(await settlementRows(gateway.records)).to.deep.equal([]);
      // The payment was never used: it pays for the same call with well-formed arguments, the first to run.
      expect(textOf(await paid('record', { value: 'whole' }, payment))).to.equal('recorded 1');
    });

    it('settles a paid call whose result holds a lone surrogate: delivered as U+FFFD, proven, charged once', async function () {
      this.timeout(60_000);
      const result = await paid('lone-surrogate', {});
      expect(result.isError).to.not.equal(true);
      expect(textOf(result)).to.equal('half \ufffd of a pair');
      expect(result._meta?.['io.sigil/execution-proof']).to.be.an('object');
      expect(result._meta?.[RECEIPT]).to.include({ success: true });
      const { settled, rows } = await gateway.expectBalanced();
      expect(rows.map((row) => row.state)).to.deep.equal(['settled', 'settled']);
      expect(settled).to.equal(1000n);
    });
  },
);
