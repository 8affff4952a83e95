import {
  Client as ClientV2,
  ProtocolError,
  StreamableHTTPClientTransport,
} from '@modelcontextprotocol/client';
import type { PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import { PROOF_META_KEY } from '../../../../services/gateway/proofs.ts';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import { TEST_DATABASES } from '../../../support/kernel.ts';
import {
  type JsonRpcAnswer,
  modernEchoEntry,
  modernEchoPackage,
  postMcp,
  postModern,
  ProbeWorld,
  textOf,
} from '../support.ts';
import { PAYMENT, RECEIPT, paidGateway, payingClient, settlementRows, type PaidGateway } from './support.ts';

/**
 * A paid tool of an SDK v2 server that asks for input first (`input_required`): the round that asks is
 * neither charged nor proven, and the same payment pays for the retry that completes the call.
 */
describe('payments: a paid call that needs input (MCP 2026-07-28 input_required)', function () {
  this.timeout(180_000);
  let world: ProbeWorld;
  let chain: DevChain;
  before(async () => {
    [world, chain] = await Promise.all([
      ProbeWorld.start({ packages: [modernEchoPackage], servers: [modernEchoEntry] }),
      startDevChain(),
    ]);
  });
  after(async () => {
    await chain?.stop();
    await world?.stop();
  });

  let facilitatorIndex = 3;
  for (const database of TEST_DATABASES) {
    describe(`on ${database.name}`, () => {
      let gateway: PaidGateway;
      const endpoint = () => `${gateway.url}/mcp/server/modern`;
      const caps = { 'io.modelcontextprotocol/clientCapabilities': { elicitation: {} } };
      const greet = async (params: Record<string, unknown>, meta: Record<string, unknown> = {}) =>
        (await (
          await postModern(
            endpoint(),
            { method: 'tools/call', params: { name: 'greet', arguments: {}, ...params } },
            { meta: { ...caps, ...meta } },
          )
        ).json()) as JsonRpcAnswer;
      const payment = async () => {
        const unpaid = await greet({});
        expect(unpaid.error?.code).to.equal(402);
        return payingClient(chain, gateway.payer).createPaymentPayload(unpaid.error?.data as PaymentRequired);
      };

      before(async () => {
        gateway = await paidGateway(world, chain, database, { facilitatorIndex: facilitatorIndex++ });
      });
      after(() => gateway?.stop());

      it('asks without charging or proving, then settles the same payment once, on the complete result', async () => {
        const paid = { [PAYMENT]: await payment() };
        const asked = (await greet({}, paid)).result ?? {};
        expect(asked.resultType).to.equal('input_required');
        expect(asked._meta).to.not.have.property(RECEIPT);
        expect(asked._meta).to.not.have.property(PROOF_META_KEY);
        // The reservation was withdrawn: nothing recorded, nothing moved.
        expect(await settlementRows(gateway.records)).to.deep.equal([]);
        const done = (
          await greet(
            {
              inputResponses: { user_name: { action: 'accept', content: { name: 'Ada' } } },
              requestState: asked.requestState,
            },
            paid,
          )
        ).result;
        expect(textOf(done)).to.equal('Hello, Ada!');
        expect(done?._meta).to.have.property(PROOF_META_KEY);
        expect(done?._meta?.[RECEIPT as never]).to.include({ success: true, payer: gateway.payer.address });
        // Used once: the next call cannot pay with it.
        const replay = await greet({}, paid);
        expect(replay.error?.code).to.equal(402);
        const { settled, rows } = await gateway.expectBalanced();
        expect(settled).to.equal(500n);
        expect(rows.map((row) => row.state)).to.deep.equal(['settled']);
      });

      it('an SDK v2 client pays once for a call it fulfils by itself', async () => {
        const client = new ClientV2(
          { name: 'sigil-test-v2', version: '1.0.0' },
          { versionNegotiation: { mode: { pin: '2026-07-28' } }, capabilities: { elicitation: {} } },
        );
        client.setRequestHandler('elicitation/create', () =>
          Promise.resolve({ action: 'accept' as const, content: { name: 'Bob' } }),
        );
        await client.connect(new StreamableHTTPClientTransport(new URL(endpoint())));
        try {
          const refused = await client.callTool({ name: 'greet', arguments: { greeting: 'Hi' } }).then(
            () => undefined,
            (err: unknown) => err,
          );
          expect(refused).to.be.instanceOf(ProtocolError);
          const required = (refused as ProtocolError).data as PaymentRequired;
          const result = await client.callTool({
            name: 'greet',
            arguments: { greeting: 'Hi' },
            _meta: { [PAYMENT]: await payingClient(chain, gateway.payer).createPaymentPayload(required) },
          });
          expect(textOf(result)).to.equal('Hi, Bob!');
          expect(result._meta?.[RECEIPT]).to.include({ success: true });
        } finally {
          await client.close();
        }
        expect((await gateway.expectBalanced()).settled).to.equal(1000n);
      });

      it('settles nothing for a call the server refused for an undeclared capability: -32021 (HTTP 400) at 2026-07-28, a tool error at 2025-11-25', async () => {
        const before = await gateway.expectBalanced();
        const modern = await postModern(
          endpoint(),
          { method: 'tools/call', params: { name: 'greet', arguments: {} } },
          { meta: { [PAYMENT]: await payment() } },
        );
        const refused = (await modern.json()) as JsonRpcAnswer;
        expect(modern.status).to.equal(400);
        expect(refused.error?.code).to.equal(-32021);
        expect(refused.error?.data).to.deep.include({ requiredCapabilities: { elicitation: { form: {} } } });
        // An error, not a result: no receipt, no proof.
        expect(refused).to.not.have.property('result');
        const legacy = (await (
          await postMcp(
            endpoint(),
            JSON.stringify({
              jsonrpc: '2.0',
              id: 1,
              method: 'tools/call',
              params: { name: 'greet', arguments: {}, _meta: { [PAYMENT]: await payment() } },
            }),
          )
        ).json()) as JsonRpcAnswer;
        expect(legacy.result?.isError).to.equal(true);
        expect(textOf(legacy.result)).to.include('elicitation');
        expect(legacy.result?._meta).to.not.have.property(RECEIPT);
        const after = await gateway.expectBalanced();
        expect(after.settled).to.equal(before.settled);
        const added = after.rows.filter((row) => !before.rows.some((earlier) => earlier.id === row.id));
        expect(added.map((row) => row.state)).to.deep.equal(['released', 'released']);
      });
    });
  }
});
