import { ensure, excerpt, notApplicableBecause, OutcomeSignal, pass } from '@sigil/plugin-api/kit';
import { encodeHeader, HEADER, MCP_PAYMENT_META_KEY } from '../../x402.ts';
import { findServableServer, path } from '../catalog.ts';
import type { DeploymentContext, Requirement } from '../context.ts';
import { CALL_TIMEOUT_MS, McpConnection, sampleArguments, type McpTool } from '../mcp.ts';
import { requiredOfMcp, requiredOfResponse, type Payment } from '../payer.ts';
import { failsOnPurpose } from '../secrets.ts';
import { serverAndTool } from '../tool-calls.ts';
import { failed, perServer, restCall, type Json } from './messages.ts';
import { LATE_CHARGE_GRACE_MS, payerFor, sleep } from './paying.ts';
import { SPEC_NO_CHARGE } from './spec.ts';

export const noChargeOnFailureRequirement: Requirement = {
  id: 'GW-7.x402-no-charge-on-failure',
  level: 'MUST',
  title:
    'A paid tool call that fails costs nothing: the payer’s balance is unchanged and the authorization unused, over REST and MCP',
  spec: SPEC_NO_CHARGE,
  service: 'gateway',
  check: async (context) => {
    const payer = payerFor(context);
    const call = await failingCall(context);
    if (!call)
      notApplicableBecause(
        'no tool can be made to fail: none fails on purpose, and none takes an argument that can be given the wrong type',
      );
    context.evidence.note(`the failing call: ${call.how} of ${call.serverId}`);
    const charged: string[] = [];
    let exercised = 0;
    const watch = async (what: string, payment: Payment, before: bigint) => {
      exercised += 1;
      await sleep(LATE_CHARGE_GRACE_MS);
      const after = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
      const used = await payer.authorizationUsed(payment, context.evidence);
      if (after !== before) charged.push(`${what} cost the payer ${before - after} base units`);
      else if (used === true) charged.push(`${what} used the payment's authorization on chain`);
    };
    // REST
    const what = `POST ${path.tool(call.serverId, call.tool.name)} (${call.how})`;
    const unpaid = await context.http.request(restCall(call.serverId, call.tool, call.args));
    const required = requiredOfResponse(unpaid);
    if (unpaid.status === 402 && required) {
      const payment = await payer.pay(required, context.evidence, what);
      const before = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
      const paid = await context.http.request({
        ...restCall(call.serverId, call.tool, call.args),
        headers: { [HEADER.signature]: encodeHeader(payment.payload) },
      });
      ensure(
        paid.status !== 402,
        `${what}, paid, was refused with 402 instead of running: ${excerpt(paid.text, 200)}`,
      );
      if (failed(paid, undefined)) await watch(what, payment, before);
      else context.evidence.note(`${what} succeeded: no failure to observe over REST`);
    } else {
      context.evidence.note(
        `${what} without a payment answered HTTP ${unpaid.status}: no paid failure over REST`,
      );
    }
    // MCP
    const connection = await McpConnection.open(context, perServer(call.serverId));
    const where = `tools/call ${call.tool.name} at POST ${connection.path} (${call.how})`;
    const unpaidMcp = await connection.send(
      'tools/call',
      { name: call.tool.name, arguments: call.args },
      CALL_TIMEOUT_MS,
    );
    const requiredMcp = requiredOfMcp(unpaidMcp);
    if (requiredMcp) {
      const payment = await payer.pay(requiredMcp, context.evidence, where);
      const before = await payer.balanceOf(payment.accepted.asset, payer.address, context.evidence);
      const reply = await connection.send(
        'tools/call',
        { name: call.tool.name, arguments: call.args, _meta: { [MCP_PAYMENT_META_KEY]: payment.payload } },
        CALL_TIMEOUT_MS,
      );
      ensure(
        requiredOfMcp(reply) === undefined,
        `${where}, paid, was refused with a payment request instead of running`,
      );
      if (failed(reply.response, reply.message)) await watch(where, payment, before);
      else context.evidence.note(`${where} succeeded: no failure to observe over MCP`);
    } else {
      context.evidence.note(`${where} without a payment asked for none: no paid failure over MCP`);
    }
    if (exercised === 0)
      notApplicableBecause(
        `no paid call failed: ${call.how} either succeeded or was refused before a payment was asked`,
      );
    ensure(charged.length === 0, `failed calls were charged: ${charged.join('; ')}`);
    return pass();
  },
};

/**
 * A call that fails: a tool that fails on purpose (named with fail, throw or error), else the
 * smoke tool given arguments of the wrong type. Undefined when neither exists.
 */
async function failingCall(
  context: DeploymentContext,
): Promise<{ serverId: string; tool: McpTool; args: Json; how: string } | undefined> {
  try {
    const server = await findServableServer(context, {
      needSmokeTool: false,
      where: {
        wanted: 'serves a tool that fails on purpose (a name with fail, throw or error)',
        unfit: (view) => {
          const tools = Array.isArray(view.details.tools) ? (view.details.tools as unknown[]) : [];
          const names = tools.flatMap((tool) =>
            typeof (tool as { name?: unknown }).name === 'string' ? [(tool as { name: string }).name] : [],
          );
          return names.length > 0 && !names.some(failsOnPurpose)
            ? 'serves no tool that fails on purpose'
            : undefined;
        },
      },
    });
    const tool = server.tools.find((candidate) => failsOnPurpose(candidate.name));
    if (tool)
      return {
        serverId: server.view.id,
        tool,
        args: sampleArguments(tool.inputSchema),
        how: `${tool.name}, which fails on purpose`,
      };
  } catch (err) {
    if (!(err instanceof OutcomeSignal) || err.outcome.status !== 'not-applicable') throw err;
    context.evidence.note(
      `no tool fails on purpose (${err.outcome.reason}); giving a tool arguments of the wrong type`,
    );
  }
  const { server, tool } = await serverAndTool(context);
  const args = wrongArguments(tool);
  if (!args) return undefined;
  return { serverId: server.view.id, tool, args, how: `${tool.name} with arguments of the wrong type` };
}

/** The least arguments a tool accepts, its first required argument given a value of another type. */
function wrongArguments(tool: McpTool): Json | undefined {
  const required = Array.isArray(tool.inputSchema.required) ? (tool.inputSchema.required as string[]) : [];
  const key = required[0];
  if (key === undefined) return undefined;
  const properties = (tool.inputSchema.properties ?? {}) as Record<string, { type?: unknown }>;
  const wrong: Record<string, unknown> = {
    string: 12345,
    number: 'not a number',
    integer: 'not a number',
    boolean: 'not a boolean',
    array: 'not an array',
    object: 'not an object',
  };
  const type = properties[key]?.type;
  if (typeof type !== 'string' || !(type in wrong)) return undefined;
  return { ...sampleArguments(tool.inputSchema), [key]: wrong[type] };
}
