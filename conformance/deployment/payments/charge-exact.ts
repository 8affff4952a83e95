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
import type { Requirement } from '../context.ts';
import { expectJson } from '../expect.ts';
import { CALL_TIMEOUT_MS, callToolResultSchema, McpConnection, textOf } from '../mcp.ts';
import { requiredOfMcp, requiredOfResponse } from '../payer.ts';
import { expectMcpPaymentRequired, expectReceipt, perServer, restCall } from './messages.ts';
import { firstPaymentForSmokeTool, settles, SETTLEMENT_WAIT_MS, specPrice } from './paying.ts';
import { SPEC_FLOW, SPEC_PRICE } from './spec.ts';

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
    const afterRest = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
    const costs = (spent: bigint) => `${spent} base units (${formatUnits(spent, price.decimals)} USD)`;
    ensure(
      before - afterRest === price.units,
      `${what}, paid, cost the payer ${costs(before - afterRest)}; the price is ${costs(price.units)}`,
    );
    // MCP: the payment in params._meta, the receipt in result._meta.
    const connection = await McpConnection.open(context, perServer(id));
    const where = `tools/call ${tool.name} at POST ${connection.path}`;
    const unpaid = await connection.send('tools/call', { name: tool.name, arguments: args }, CALL_TIMEOUT_MS);
    const mcpPayment = await payer.pay(expectMcpPaymentRequired(unpaid, where), context.evidence, where);
    const reply = await connection.send(
      'tools/call',
      { name: tool.name, arguments: args, _meta: { [MCP_PAYMENT_META_KEY]: mcpPayment.payload } },
      CALL_TIMEOUT_MS,
    );
    ensure(
      requiredOfMcp(reply) === undefined,
      `${where}, paid, still asks for a payment: ${excerpt(JSON.stringify(reply.message), 200)}`,
    );
    const mcpResult = expectShape(
      callToolResultSchema.extend({ _meta: z.record(z.string(), z.unknown()).optional() }).loose(),
      (reply.message as { result?: unknown } | undefined)?.result,
      `${where}, paid: the reply is not a tool result`,
    );
    ensure(
      mcpResult.isError !== true,
      `${where}, paid, answered a tool error: ${excerpt(textOf(mcpResult), 200)}`,
    );
    expectReceipt(
      mcpResult._meta?.[MCP_PAYMENT_RESPONSE_META_KEY],
      `${where}, paid`,
      `_meta["${MCP_PAYMENT_RESPONSE_META_KEY}"]`,
    );
    ensure(
      await settles(context, payer, mcpPayment),
      `${where}, paid, answered but its payment was not settled on chain within ${SETTLEMENT_WAIT_MS / 1000} s`,
    );
    const afterMcp = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
    ensure(
      afterRest - afterMcp === price.units,
      `${where}, paid, cost the payer ${costs(afterRest - afterMcp)}; the price is ${costs(price.units)}`,
    );
    return pass();
  },
};
