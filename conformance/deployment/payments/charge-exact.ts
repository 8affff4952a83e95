import { ensure, excerpt, expectShape, pass } from '@sigil/plugin-api/kit';
import { z } from 'zod';
import {
  decodeHeader,
  encodeHeader,
  formatUnits,
  HEADER,
  MCP_PAYMENT_META_KEY,
  MCP_PAYMENT_RESPONSE_META_KEY,
} from '../../x402.ts';
import type { DeploymentContext, Requirement } from '../context.ts';
import { expectJson } from '../expect.ts';
import {
  CALL_TIMEOUT_MS,
  callToolResultSchema,
  McpConnection,
  MODERN_PROTOCOL_VERSION,
  textOf,
  type McpTool,
} from '../mcp.ts';
import { requiredOfMcp, requiredOfResponse, type Payer, type Payment } from '../payer.ts';
import { smokeCall } from '../tool-calls.ts';
import {
  expectMcpPaymentRequired,
  expectReceipt,
  legacyPaymentRequired,
  perServer,
  restCall,
  type Json,
} from './messages.ts';
import { firstPaymentForSmokeTool, payerFor, settles, SETTLEMENT_WAIT_MS, specPrice } from './paying.ts';
import { SPEC_FLOW, SPEC_PRICE } from './spec.ts';

type Price = Awaited<ReturnType<typeof specPrice>>;

function expectCostThePrice(spent: bigint, price: Price, what: string): void {
  const costs = (units: bigint) => `${units} base units (${formatUnits(units, price.decimals)} USD)`;
  ensure(spent === price.units, `${what} cost the payer ${costs(spent)}; the price is ${costs(price.units)}`);
}

/**
 * A paid tools/call over `connection`, at its revision: asked for a payment, paid in
 * `params._meta["x402/payment"]`, run, its receipt in `result._meta["x402/payment-response"]`,
 * settled on chain for exactly the price. Returns the payment, spent.
 */
async function expectMcpChargedExactly(
  context: DeploymentContext,
  payer: Payer,
  connection: McpConnection,
  tool: McpTool,
  args: Json,
): Promise<Payment> {
  const where = `${connection.what('tools/call')} ${tool.name} at POST ${connection.path}`;
  const unpaid = await connection.send('tools/call', { name: tool.name, arguments: args }, CALL_TIMEOUT_MS);
  const { required } = expectMcpPaymentRequired(unpaid, where);
  const payment = await payer.pay(required, context.evidence, where);
  const price = await specPrice(payer, payment.accepted.asset);
  const before = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
  const reply = await connection.send(
    'tools/call',
    { name: tool.name, arguments: args, _meta: { [MCP_PAYMENT_META_KEY]: payment.payload } },
    CALL_TIMEOUT_MS,
  );
  ensure(
    requiredOfMcp(reply) === undefined,
    `${where}, paid, still asks for a payment: ${excerpt(JSON.stringify(reply.message), 200)}`,
  );
  const result = expectShape(
    callToolResultSchema.extend({ _meta: z.record(z.string(), z.unknown()).optional() }).loose(),
    connection.result(reply, `${where}, paid`),
    `${where}, paid: the reply is not a tool result`,
  );
  ensure(result.isError !== true, `${where}, paid, answered a tool error: ${excerpt(textOf(result), 200)}`);
  expectReceipt(
    result._meta?.[MCP_PAYMENT_RESPONSE_META_KEY],
    `${where}, paid`,
    `_meta["${MCP_PAYMENT_RESPONSE_META_KEY}"]`,
  );
  ensure(
    await settles(context, payer, payment),
    `${where}, paid, answered but its payment was not settled on chain within ${SETTLEMENT_WAIT_MS / 1000} s`,
  );
  const after = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
  expectCostThePrice(before - after, price, `${where}, paid,`);
  return payment;
}

export const chargeExactRequirement: Requirement = {
  id: 'GW-3.x402-charge-exact',
  level: 'MUST',
  title:
    'A paid successful tool call costs the payer exactly the price, over REST and MCP, and says so in its receipt',
  spec: `${SPEC_FLOW}; ${SPEC_PRICE}; x402 v2: PAYMENT-RESPONSE (HTTP), _meta["x402/payment-response"] (MCP)`,
  service: 'gateway',
  check: async (context) => {
    // REST: 402, paid, 200 with PAYMENT-RESPONSE; the payer's balance drops by the price.
    const { payer, id, tool, args, what, payment } = await firstPaymentForSmokeTool(context);
    const price = await specPrice(payer, payment.accepted.asset);
    const before = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
    const paid = await context.http.request({
      ...restCall(id, tool, args),
      headers: { [HEADER.signature]: encodeHeader(payment.payload) },
    });
    ensure(
      paid.status !== 402,
      `${what}, paid, was refused with 402: ${excerpt(JSON.stringify(requiredOfResponse(paid)?.error ?? paid.text), 200)}`,
    );
    const result = expectJson(paid, 200, callToolResultSchema.loose(), `${what}, paid`);
    ensure(result.isError !== true, `${what}, paid, answered a tool error: ${excerpt(textOf(result), 200)}`);
    expectReceipt(decodeHeader(paid.headers.get(HEADER.response)), `${what}, paid`, 'PAYMENT-RESPONSE');
    ensure(
      await settles(context, payer, payment),
      `${what}, paid, answered 200 but its payment was not settled on chain within ${SETTLEMENT_WAIT_MS / 1000} s`,
    );
    const after = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
    expectCostThePrice(before - after, price, `${what}, paid,`);
    // MCP: the payment in params._meta, the receipt in result._meta.
    await expectMcpChargedExactly(
      context,
      payer,
      await McpConnection.open(context, perServer(id)),
      tool,
      args,
    );
    return pass();
  },
};

export const mcp2026ChargeExactRequirement: Requirement = {
  id: 'GW-3.x402-mcp-2026-charge-exact',
  level: 'MUST',
  title: `A paid tools/call at MCP ${MODERN_PROTOCOL_VERSION}, paid as at 2025-11-25, runs, costs the payer exactly the price once, carries its receipt in result._meta, and the same payment sent again is asked to pay`,
  spec: `${SPEC_FLOW}; ${SPEC_PRICE}; x402 v2 MCP transport: _meta["x402/payment"], _meta["x402/payment-response"]; MCP ${MODERN_PROTOCOL_VERSION} (the gateway serves the same payments on both revisions)`,
  service: 'gateway',
  features: ['mcp-2026'],
  check: async (context) => {
    const payer = payerFor(context);
    const { server, tool, args } = await smokeCall(context);
    const path = perServer(server.view.id);
    await legacyPaymentRequired(context, path, tool, args);
    const connection = McpConnection.modern(context, path);
    const payment = await expectMcpChargedExactly(context, payer, connection, tool, args);
    const again = await connection.send(
      'tools/call',
      { name: tool.name, arguments: args, _meta: { [MCP_PAYMENT_META_KEY]: payment.payload } },
      CALL_TIMEOUT_MS,
    );
    expectMcpPaymentRequired(
      again,
      `${connection.what('tools/call')} ${tool.name} at POST ${path} with a payment already settled`,
    );
    return pass();
  },
};
