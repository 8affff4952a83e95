import { ProtocolError, type Client as ClientV2 } from '@modelcontextprotocol/client';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { parsePaymentRequired } from '@x402/core/schemas';
import type { PaymentPayload, PaymentRequired } from '@x402/core/types';
import { expect } from 'chai';
import { startDevChain, type DevChain } from '../../../support/chain.ts';
import { TEST_DATABASES } from '../../../support/kernel.ts';
import {
  PROOF_META_KEY,
  requestHash,
  responseHash,
  type ExecutionProof,
} from '../../../../services/gateway/proofs.ts';
import { mcpClient, mcpClientV2, textOf, walletToken, type ProbeWorld } from '../support.ts';
import {
  PAYMENT,
  RECEIPT,
  payingClient,
  paidGateway,
  refusal,
  settlementRows,
  sharedProbeWorld,
  stopSharedProbeWorld,
  type PaidGateway,
} from './support.ts';

after(stopSharedProbeWorld); // root level: once every file has used the shared probe world

/** An MCP client (the official SDK) pays for tools/call with x402's MCP transport, on anvil. */
describe('payments: MCP tools/call paid with x402 on anvil', function () {
  this.timeout(120_000);
  let world: ProbeWorld;
  let chain: DevChain;
  let gateway: PaidGateway;
  let client: Client;
  let token: string;

  before(async () => {
    [world, chain] = await Promise.all([sharedProbeWorld(), startDevChain()]);
    gateway = await paidGateway(world, chain, TEST_DATABASES[0]!, { facilitatorIndex: 3 });
    ({ token } = await walletToken(gateway.url));
    client = await mcpClient(`${gateway.url}/mcp`, token, 'paid');
    const enabled = await client.callTool({
      name: 'gateway_enable_server',
      arguments: { serverId: 'probe' },
    });
    expect(enabled.isError, textOf(enabled)).to.not.equal(true);
  });
  after(async () => {
    await client?.close();
    await gateway?.stop();
    await chain?.stop();
  });

  const payFor = (required: PaymentRequired): Promise<PaymentPayload> =>
    payingClient(chain, gateway.payer).createPaymentPayload(required);

  it('an unpaid tools/call is a JSON-RPC error 402 whose data is the x402 PaymentRequired; nothing is recorded', async () => {
    const err = await refusal(client.callTool({ name: 'probe__echo', arguments: { message: 'unpaid' } }));
    expect(err.code).to.equal(402);
    const required = err.data as PaymentRequired;
    expect(required.x402Version).to.equal(2);
    expect(required.resource.url).to.equal('mcp://tool/probe__echo');
    // The hint rides beside the terms and in the message; x402's own schema still reads the terms.
    const { hint } = err.data as { hint: string };
    expect(hint).to.match(/^Pay with x402: .*params\._meta\["x402\/payment"\]/);
    expect(hint).to.not.include('examples/');
    expect(err.message).to.include(hint);
    expect(parsePaymentRequired(err.data).success).to.equal(true);
    expect(required.accepts).to.have.length(1);
    expect(required.accepts[0]).to.deep.include({
      scheme: 'exact',
      network: 'eip155:8453',
      amount: '500',
      asset: chain.token.address,
      payTo: gateway.payTo,
    });
    expect(await settlementRows(gateway.records)).to.deep.equal([]);
  });

  it('pays in params._meta["x402/payment"]: the result carries the receipt in _meta, the payer loses 500', async () => {
    const err = await refusal(client.callTool({ name: 'probe__echo', arguments: { message: 'paid' } }));
    const payment = await payFor(err.data as PaymentRequired);
    const result = (await client.callTool({
      name: 'probe__echo',
      arguments: { message: 'paid over MCP' },
      _meta: { [PAYMENT]: payment },
    })) as CallToolResult;
    expect(result.isError).to.not.equal(true);
    expect(textOf(result)).to.equal('paid over MCP');
    const receipt = result._meta?.[RECEIPT] as Record<string, unknown>;
    expect(receipt).to.include({ success: true, network: 'eip155:8453', payer: gateway.payer.address });
    expect(receipt.transaction).to.match(/^0x[0-9a-f]{64}$/);
    const { settled, rows } = await gateway.expectBalanced();
    expect(settled).to.equal(500n);
    expect(rows.map((row) => [row.state, row.transaction])).to.deep.equal([['settled', receipt.transaction]]);
  });

  it('the same payment again is refused with 402 (its nonce is used on chain); no second transfer', async () => {
    const err = await refusal(client.callTool({ name: 'probe__echo', arguments: { message: 'x' } }));
    const payment = await payFor(err.data as PaymentRequired);
    const call = () =>
      client.callTool({ name: 'probe__echo', arguments: { message: 'once' }, _meta: { [PAYMENT]: payment } });
    expect(textOf(await call())).to.equal('once');
    const replay = await refusal(call());
    expect(replay.code).to.equal(402);
    // Verification runs before the reservation: a settled payment is refused by the chain's answer.
    expect((replay.data as PaymentRequired).error).to.be.oneOf([
      'invalid_exact_evm_nonce_already_used',
      'payment_already_used',
    ]);
    expect((await gateway.expectBalanced()).settled).to.equal(1000n);
  });

  it('meta-tools and tools/list stay free', async () => {
    const { tools } = await client.listTools();
    expect(tools.map((tool) => tool.name)).to.include.members(['gateway_search_servers', 'probe__echo']);
    for (const [name, args] of [
      ['gateway_search_servers', { query: 'probe' }],
      ['gateway_describe_server', { serverId: 'probe' }],
      ['gateway_list_enabled', {}],
      ['gateway_disable_server', { serverId: 'probe-locked' }],
      ['gateway_enable_server', { serverId: 'probe' }],
    ] as const) {
      const result = (await client.callTool({ name, arguments: args })) as CallToolResult;
      expect(result.isError, `${name}: ${textOf(result)}`).to.not.equal(true);
      expect(result._meta?.[RECEIPT], name).to.equal(undefined);
    }
    expect((await gateway.expectBalanced()).settled).to.equal(1000n);
  });

  it('POST /mcp/server/probe: an unpaid call is refused with 402, a paid one runs and settles', async () => {
    const perServer = await mcpClient(`${gateway.url}/mcp/server/probe`);
    try {
      const { tools } = await perServer.listTools();
      expect(tools.map((tool) => tool.name)).to.include('echo');
      const err = await refusal(perServer.callTool({ name: 'echo', arguments: { message: 'unpaid' } }));
      expect(err.code).to.equal(402);
      const required = err.data as PaymentRequired;
      expect(required.accepts[0]).to.deep.include({ amount: '500', payTo: gateway.payTo });
      const result = (await perServer.callTool({
        name: 'echo',
        arguments: { message: 'per server' },
        _meta: { [PAYMENT]: await payFor(required) },
      })) as CallToolResult;
      expect(textOf(result)).to.equal('per server');
      expect(result._meta?.[RECEIPT]).to.include({ success: true, payer: gateway.payer.address });
    } finally {
      await perServer.close();
    }
    expect((await gateway.expectBalanced()).settled).to.equal(1500n);
  });

  it('a tool that fails is not charged: isError, no receipt, the record released, nothing moved', async () => {
    const err = await refusal(client.callTool({ name: 'probe__fail', arguments: {} }));
    const payment = await payFor(err.data as PaymentRequired);
    const result = (await client.callTool({
      name: 'probe__fail',
      arguments: {},
      _meta: { [PAYMENT]: payment },
    })) as CallToolResult;
    expect(result.isError).to.equal(true);
    expect(textOf(result)).to.include('failed on purpose');
    expect(result._meta?.[RECEIPT]).to.equal(undefined);
    const { settled, rows } = await gateway.expectBalanced();
    expect(settled).to.equal(1500n);
    expect(rows.filter((row) => row.state === 'released')).to.have.length(1);
    // A released payment is spent for this gateway, though the chain never saw it.
    const replay = await refusal(
      client.callTool({
        name: 'probe__echo',
        arguments: { message: 'again' },
        _meta: { [PAYMENT]: payment },
      }),
    );
    expect((replay.data as PaymentRequired).error).to.equal('payment_already_used');
    expect((await gateway.expectBalanced()).settled).to.equal(1500n);
  });

  it('oversized arguments (> 100 KB) are refused with -32602 before verification: no record, the payment stays usable', async () => {
    const err = await refusal(client.callTool({ name: 'probe__echo', arguments: { message: 'x' } }));
    const payment = await payFor(err.data as PaymentRequired);
    const before = (await settlementRows(gateway.records)).length;
    const tooBig = await refusal(
      client.callTool({
        name: 'probe__echo',
        arguments: { message: 'x'.repeat(110 * 1024) },
        _meta: { [PAYMENT]: payment },
      }),
    );
    expect(tooBig.code).to.equal(-32602);
    expect(tooBig.message).to.match(/limit is 102400/);
    expect(await settlementRows(gateway.records)).to.have.length(before);
    const result = (await client.callTool({
      name: 'probe__echo',
      arguments: { message: 'small now' },
      _meta: { [PAYMENT]: payment },
    })) as CallToolResult;
    expect(textOf(result)).to.equal('small now');
    expect((await gateway.expectBalanced()).settled).to.equal(2000n);
  });

  /** A paid call at 2026-07-28 through `v2`: refused with 402 and the terms, then paid in `_meta`. */
  const payAtModern = async (v2: ClientV2, name: string, message: string): Promise<CallToolResult> => {
    const err = await refusal(v2.callTool({ name, arguments: { message: 'unpaid' } }), ProtocolError);
    expect(err.code).to.equal(402);
    const required = err.data as PaymentRequired;
    expect(parsePaymentRequired(err.data).success).to.equal(true);
    expect(required.accepts[0]).to.deep.include({ amount: '500', payTo: gateway.payTo });
    return (await v2.callTool({
      name,
      arguments: { message },
      _meta: { [PAYMENT]: await payFor(required) },
    })) as CallToolResult;
  };

  it('at 2026-07-28 (SDK v2 client on the same wallet and session): 402 with the terms, paid in _meta, the receipt, and a proof whose hashes cover the result with or without its framing', async () => {
    const v2 = await mcpClientV2(`${gateway.url}/mcp`, token, 'paid');
    try {
      expect(v2.getProtocolEra()).to.equal('modern');
      expect((await v2.listTools()).tools.map((tool) => tool.name)).to.include('probe__echo');
      const result = await payAtModern(v2, 'probe__echo', 'paid at 2026-07-28');
      expect(textOf(result)).to.equal('paid at 2026-07-28');
      expect(result._meta?.[RECEIPT]).to.include({ success: true, payer: gateway.payer.address });
      // The proof commits to the result as the gateway sent it (with its resultType framing) and as the
      // SDK hands it back (without): the hash leaves the framing out.
      const proof = result._meta?.[PROOF_META_KEY] as ExecutionProof;
      expect(proof.requestHash).to.equal(requestHash('probe', 'echo', { message: 'paid at 2026-07-28' }));
      expect(responseHash({ ...result, resultType: 'complete' } as CallToolResult)).to.equal(
        proof.responseHash,
      );
      expect(responseHash(result)).to.equal(proof.responseHash);
    } finally {
      await v2.close();
    }
    expect((await gateway.expectBalanced()).settled).to.equal(2500n);
  });

  it('at 2026-07-28 on POST /mcp/server/probe: an unpaid call is refused with 402, a paid one runs and settles', async () => {
    const perServer = await mcpClientV2(`${gateway.url}/mcp/server/probe`);
    try {
      const result = await payAtModern(perServer, 'echo', 'per server at 2026-07-28');
      expect(textOf(result)).to.equal('per server at 2026-07-28');
      expect(result._meta?.[RECEIPT]).to.include({ success: true, payer: gateway.payer.address });
    } finally {
      await perServer.close();
    }
    expect((await gateway.expectBalanced()).settled).to.equal(3000n);
  });
});
