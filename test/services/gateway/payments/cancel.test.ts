import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { mcpClient, textOf, walletToken } from '../support.ts';
import {
  PAYMENT,
  RECEIPT,
  anvilWorld,
  balances,
  cancelAuthorization,
  eventually,
  gatewayBehindProxy,
  payingClient,
  sendsTransaction,
  settlementRows,
  stopSharedProbeWorld,
  type SettlementRecord,
} from './support.ts';

after(stopSharedProbeWorld); // root level: once every file has used the shared probe world

/**
 * The payer cancels its EIP-3009 authorization on chain (cancelAuthorization, signed with viem) while
 * the paid tool runs. A cancelled authorization is used up, but it paid no one: the call must not be
 * recorded settled, and its result must not be served.
 */
describe('payments: an authorization cancelled by the payer during the call (anvil, MCP)', function () {
  this.timeout(120_000);
  const anvil = anvilWorld();

  describeEachDatabase('one gateway', (database) => {
    const setup = gatewayBehindProxy(anvil, database);
    let client: Client;

    before(async () => {
      const { url } = setup.gateway;
      client = await mcpClient(`${url}/mcp`, (await walletToken(url)).token, 'cancel');
      const enabled = await client.callTool({
        name: 'gateway_enable_server',
        arguments: { serverId: 'probe' },
      });
      expect(enabled.isError, textOf(enabled)).to.not.equal(true);
    });
    after(async () => {
      await client?.close();
    });

    const rowOf = async (payment: PaymentPayload): Promise<SettlementRecord | undefined> => {
      const { nonce } = (payment.payload as { authorization: { nonce: string } }).authorization;
      return (await settlementRows(setup.gateway.records)).find((row) =>
        row.id.endsWith(nonce.toLowerCase()),
      );
    };
    const paymentFor = async (tool: string): Promise<PaymentPayload> => {
      const err = await client.callTool({ name: tool, arguments: { ms: 1 } }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(err).to.be.instanceOf(McpError);
      return payingClient(anvil.chain, setup.gateway.payer).createPaymentPayload(
        (err as McpError).data as PaymentRequired,
      );
    };

    /** A paid call of probe__sleep (1.5 s) under way: its answer to come, and its reservation once written. */
    const sleepingCall = async (payment: PaymentPayload) => {
      const answer = client
        .callTool({ name: 'probe__sleep', arguments: { ms: 1500 }, _meta: { [PAYMENT]: payment } })
        .then(
          (result) => result as CallToolResult,
          (error: unknown) => error,
        );
      const reserved = await eventually('the reservation', async () => {
        const row = await rowOf(payment);
        return row?.state === 'executing' && row;
      });
      return { answer, reserved };
    };

    it('cancelled while the tool runs: a JSON-RPC 402 (authorization_canceled), not the result; the record failed, nothing moved', async () => {
      const payment = await paymentFor('probe__sleep');
      const { answer: call } = await sleepingCall(payment);
      await cancelAuthorization(anvil.chain, setup.gateway.payer, payment);
      const answer = await call;
      expect(answer, `the result was served: ${JSON.stringify(answer)}`).to.be.instanceOf(McpError);
      const refusal = answer as McpError;
      expect(refusal.code).to.equal(402);
      expect((refusal.data as PaymentRequired).error).to.equal('authorization_canceled');
      expect(JSON.stringify(refusal.data)).to.not.include('slept');
      const row = (await rowOf(payment))!;
      expect([row.state, row.transaction]).to.deep.equal(['failed', null]);
      const { settled } = await setup.gateway.expectBalanced();
      expect(settled).to.equal(0n);
    });

    it("cancelled while the RPC's logs lag (the nonce used, no event says how): a JSON-RPC 402 naming the payment id, never the result; the retry records it failed", async () => {
      const payment = await paymentFor('probe__sleep');
      const { answer: call, reserved } = await sleepingCall(payment);
      setup.proxy.intercept = (methods) => (methods.includes('eth_getLogs') ? 'lagging' : 'forward');
      await cancelAuthorization(anvil.chain, setup.gateway.payer, payment);
      const answer = await call;
      expect(answer, `the result was served: ${JSON.stringify(answer)}`).to.be.instanceOf(McpError);
      const refusal = answer as McpError;
      expect(refusal.code).to.equal(402);
      const data = refusal.data as PaymentRequired;
      expect(data.error).to.equal('settlement_unproven');
      expect(data.extensions?.['io.sigil/paid-result']).to.deep.include({ paymentId: reserved.id });
      expect(JSON.stringify(refusal.data)).to.not.include('slept');
      const kept = (await rowOf(payment))!;
      expect(kept.state).to.equal('settling');
      expect(kept.result, 'kept for its payer, should the settlement prove out').to.be.a('string');
      setup.proxy.intercept = undefined;
      const row = await eventually('the retried settlement', async () => {
        const found = await rowOf(payment);
        return found?.state === 'settling' ? undefined : found;
      });
      expect([row.state, row.transaction, row.result]).to.deep.equal(['failed', null, null]);
      const { settled } = await setup.gateway.expectBalanced();
      expect(settled).to.equal(0n);
    });

    it('cancelled while its settlement is pending (the RPC cut as it was sent): the retry records it failed, not settled', async () => {
      const payment = await paymentFor('probe__sleep');
      setup.proxy.intercept = (methods) => (sendsTransaction(methods) ? 'cut' : 'forward');
      const result = (await client.callTool({
        name: 'probe__sleep',
        arguments: { ms: 10 },
        _meta: { [PAYMENT]: payment },
      })) as CallToolResult;
      expect(result._meta?.[RECEIPT]).to.include({ success: false, errorReason: 'settlement_pending' });
      expect((await rowOf(payment))!.state).to.equal('settling');
      await cancelAuthorization(anvil.chain, setup.gateway.payer, payment);
      setup.proxy.intercept = undefined;
      const row = await eventually('the retried settlement', async () => {
        const found = await rowOf(payment);
        return found?.state === 'settling' ? undefined : found;
      });
      expect([row.state, row.transaction]).to.deep.equal(['failed', null]);
      expect(await balances(anvil.chain)(setup.gateway.payTo)).to.equal(0n);
      const { settled } = await setup.gateway.expectBalanced();
      expect(settled).to.equal(0n);
    });
  });
});
