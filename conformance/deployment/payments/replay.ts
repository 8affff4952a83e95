import { ensure, pass } from '@sigil/plugin-api/kit';
import { encodeHeader, HEADER, MCP_PAYMENT_META_KEY } from '../../x402.ts';
import type { Requirement } from '../context.ts';
import { CALL_TIMEOUT_MS, McpConnection } from '../mcp.ts';
import { expectMcpPaymentRequired, perServer, restCall } from './messages.ts';
import {
  firstPaymentForSmokeTool,
  LATE_CHARGE_GRACE_MS,
  settles,
  SETTLEMENT_WAIT_MS,
  sleep,
} from './paying.ts';
import { SPEC_FLOW } from './spec.ts';

export const replayRefusedRequirement: Requirement = {
  id: 'GW-3.x402-replay-refused',
  level: 'MUST',
  title:
    'A payment presented again (at once, after it settled, and over MCP) is refused with a payment request and charged once only',
  spec: `${SPEC_FLOW}: a verified payment is settled once`,
  service: 'gateway',
  check: async (context) => {
    const { payer, id, tool, args, what, payment } = await firstPaymentForSmokeTool(context);
    const before = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
    const paidRequest = {
      ...restCall(id, tool, args),
      headers: { [HEADER.signature]: encodeHeader(payment.payload) },
    };
    // The same payment three times at once: one call runs, the others are refused.
    const concurrent = await Promise.all([1, 2, 3].map(() => context.http.request(paidRequest)));
    const statuses = concurrent.map((response) => response.status);
    context.evidence.note(`the same payment sent 3 times at once: HTTP ${statuses.join(', ')}`);
    const ran = statuses.filter((status) => status === 200).length;
    ensure(
      ran === 1,
      `the same payment sent 3 times at once ran ${ran} call(s) (HTTP ${statuses.join(', ')}); exactly one must run`,
    );
    ensure(
      statuses.every((status) => status === 200 || status === 402),
      `the copies of a payment already in use were not answered 402 (HTTP ${statuses.join(', ')})`,
    );
    ensure(
      await settles(context, payer, payment),
      `${what}, paid, ran but its payment was not settled on chain within ${SETTLEMENT_WAIT_MS / 1000} s`,
    );
    // Again, once it settled.
    const again = await context.http.request(paidRequest);
    ensure(
      again.status === 402,
      `${what} with a payment already settled answered HTTP ${again.status}, not 402`,
    );
    // Over MCP: the same payment in params._meta.
    const connection = await McpConnection.open(context, perServer(id));
    const where = `tools/call ${tool.name} at POST ${connection.path}`;
    const replay = await connection.send(
      'tools/call',
      { name: tool.name, arguments: args, _meta: { [MCP_PAYMENT_META_KEY]: payment.payload } },
      CALL_TIMEOUT_MS,
    );
    expectMcpPaymentRequired(replay, `${where} with a payment already settled over REST`);
    await sleep(LATE_CHARGE_GRACE_MS);
    const after = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
    ensure(
      before - after === BigInt(payment.accepted.amount),
      `one payment presented 5 times cost the payer ${before - after} base units; it was for ${payment.accepted.amount}, once`,
    );
    return pass();
  },
};
