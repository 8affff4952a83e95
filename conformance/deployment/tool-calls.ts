import { z } from 'zod';
import { ensure, excerpt, failWith, OutcomeSignal, pass } from '@sigil/plugin-api/kit';
import { findServableServer, path, type ServableServer, type ServerCondition } from './catalog.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { identifyMetaTools, namespacedTools, switchServer } from './discovery.ts';
import { expectJson } from './expect.ts';
import {
  CALL_TIMEOUT_MS,
  callToolResultSchema,
  expectResult,
  freshSessionId,
  isJsonRpcError,
  jsonRpcErrorSchema,
  McpConnection,
  notApplicableIfPaymentRequired,
  sampleArguments,
  textOf,
  type CallToolResult,
  type McpTool,
} from './mcp.ts';
import { requestPaying } from './payer.ts';
import { bearer, GATEWAY_AUTH, signIn } from './wallet.ts';

/**
 * Tool calls (gateway spec parts 1, 4 and 8): a verified server's smoke tool answers over MCP and
 * REST, and arguments over 100 KB are refused. Payments (x402) are judged in payments.ts; here a call
 * that asks for one is paid when the tester lent a payer, and otherwise makes the check not applicable.
 */

/** Comfortably under and over 100 KB, whether a KB is 1000 or 1024 bytes. */
const UNDER_LIMIT_BYTES = 95_000;
const OVER_LIMIT_BYTES = 110_000;

/** A server with a smoke tool when one exists; otherwise any servable server and its first tool. */
export async function serverAndTool(
  context: DeploymentContext,
): Promise<{ server: ServableServer; tool: McpTool; smoke: boolean }> {
  try {
    const server = await findServableServer(context, { needSmokeTool: true });
    return { server, tool: smokeToolOf(server), smoke: true };
  } catch (err) {
    if (!(err instanceof OutcomeSignal) || err.outcome.status !== 'not-applicable') throw err;
    context.evidence.note(`no server with a passed smoke tool (${err.outcome.reason}); using any tool`);
    const server = await findServableServer(context, { needSmokeTool: false });
    return { server, tool: server.tools[0] as McpTool, smoke: false };
  }
}

export function smokeToolOf(server: ServableServer): McpTool {
  const name = server.view.smokeTool;
  const tool = server.tools.find((candidate) => candidate.name === name);
  ensure(
    tool !== undefined,
    `${server.view.id} names ${String(name)} as its smoke tool, but GET ${path.tools(server.view.id)} does not list it`,
  );
  return tool;
}

/**
 * The smoke tool of a verified server (one meeting `where`, when given), with the least arguments
 * it takes: a call that must succeed.
 */
export async function smokeCall(
  context: DeploymentContext,
  where?: ServerCondition,
): Promise<{ server: ServableServer; tool: McpTool; args: Record<string, unknown> }> {
  const server = await findServableServer(context, { needSmokeTool: true, where });
  const tool = smokeToolOf(server);
  return { server, tool, args: sampleArguments(tool.inputSchema) };
}

/** Arguments for `tool` whose JSON is exactly `bytes` long: a string argument filled, or one added. */
function argumentsOfSize(tool: McpTool, bytes: number): Record<string, unknown> {
  const base = sampleArguments(tool.inputSchema);
  const properties = (tool.inputSchema.properties ?? {}) as Record<string, { type?: unknown }>;
  const key =
    Object.keys(base).find((name) => properties[name]?.type === 'string') ?? 'sigil_conformance_padding';
  const empty = { ...base, [key]: '' };
  const fill = bytes - Buffer.byteLength(JSON.stringify(empty));
  return { ...base, [key]: 'x'.repeat(Math.max(0, fill)) };
}

const partTypes = (result: CallToolResult): string => result.content.map((part) => part.type).join(',');

export const toolCallRequirements: readonly Requirement[] = [
  {
    id: 'GW-8.argument-limit',
    level: 'MUST',
    title: 'tools/call with arguments over 100 KB serialized is refused with a JSON-RPC error',
    spec: 'gateway spec part 8, limits: "Maximum serialized argument size for tools/call: 100 KB"; part 7 (standard JSON-RPC errors)',
    service: 'gateway',
    check: async (context) => {
      const { server, tool, smoke } = await serverAndTool(context);
      const endpoint = `/mcp/server/${encodeURIComponent(server.view.id)}`;
      const connection = await McpConnection.open(context, endpoint);
      if (smoke) {
        // Controls: the tool answers an ordinary call, and one just under the limit is not refused.
        const ordinary = await connection.callTool(tool.name, sampleArguments(tool.inputSchema));
        ensure(
          ordinary.isError !== true,
          `the smoke tool ${tool.name} of ${server.view.id} answered a tool error: ${excerpt(textOf(ordinary), 300)}`,
        );
        const under = await connection.callToolReply(tool.name, argumentsOfSize(tool, UNDER_LIMIT_BYTES));
        notApplicableIfPaymentRequired(under, context);
        expectResult(
          under,
          `tools/call ${tool.name} with ${UNDER_LIMIT_BYTES} bytes of arguments (under 100 KB)`,
        );
      } else {
        context.evidence.note(
          `${tool.name} is no declared smoke tool: it is only called with oversized arguments, which must not run it`,
        );
      }
      // Paid when asked: a gateway may ask before it looks at the arguments, and must still refuse them.
      const over = await connection.callToolReply(tool.name, argumentsOfSize(tool, OVER_LIMIT_BYTES));
      notApplicableIfPaymentRequired(over, context);
      ensure(
        over.response.status < 500,
        `tools/call with ${OVER_LIMIT_BYTES} bytes of arguments: HTTP ${over.response.status}, a server error`,
      );
      if (!isJsonRpcError(over)) {
        const result = callToolResultSchema.safeParse(
          (over.message as { result?: unknown } | undefined)?.result,
        );
        failWith(
          `tools/call ${tool.name} with ${OVER_LIMIT_BYTES} bytes of arguments was not refused with a JSON-RPC error: ` +
            (result.success
              ? `it ran and answered ${result.data.isError === true ? 'a tool error' : 'a result'}: ${excerpt(textOf(result.data), 200)}`
              : `HTTP ${over.response.status}: ${excerpt(over.response.text, 200)}`),
        );
      }
      const error = jsonRpcErrorSchema.parse(over.message);
      context.evidence.note(`refused: JSON-RPC error ${error.error.code}`, { message: error.error.message });
      return pass();
    },
  },
  {
    id: 'GW-1.tool-call',
    level: 'MUST',
    title:
      'The smoke tool of a verified server answers without error over MCP (enabled, namespaced) and over REST POST /api/servers/:id/tools/:name alike',
    spec: 'gateway spec part 1: "Starts a server on demand when a tool of an enabled server is called, routes the call, and returns the result"; part 3 (tool_smoke_passed); part 4: tools/call and POST /api/servers/:id/tools/:name',
    service: 'gateway',
    check: async (context) => {
      const server = await findServableServer(context, { needSmokeTool: true });
      const smoke = smokeToolOf(server);
      const id = server.view.id;
      const signedIn = await signIn(context, GATEWAY_AUTH);
      const connection = await McpConnection.open(context, '/mcp', {
        ...bearer(signedIn.token),
        'x-mcp-session': freshSessionId(),
      });
      const fresh = await connection.listTools();
      const meta = identifyMetaTools(fresh);
      await switchServer(connection, meta, id, true);
      let overMcp: CallToolResult;
      try {
        const listed = await connection.listTools();
        const added = namespacedTools(server, fresh, listed);
        // The shortest prefix: `srv__echo`, not `srv__say_echo`, when both end with `echo`.
        const name = added
          .filter((candidate) => candidate !== smoke.name && candidate.endsWith(smoke.name))
          .sort((a, b) => a.length - b.length)[0];
        const tool = listed.find((candidate) => candidate.name === name) as McpTool;
        overMcp = await connection.callTool(tool.name, sampleArguments(tool.inputSchema));
        ensure(
          overMcp.isError !== true,
          `tools/call ${tool.name} (the smoke tool of ${id}) over MCP answered a tool error: ${excerpt(textOf(overMcp), 300)}`,
        );
      } finally {
        // Tidying up: a failure here must not replace the finding above.
        await switchServer(connection, meta, id, false).catch(() => undefined);
      }
      const { response } = await requestPaying(
        context,
        {
          service: 'gateway',
          method: 'POST',
          path: path.tool(id, smoke.name),
          json: { arguments: sampleArguments(smoke.inputSchema) },
          timeoutMs: CALL_TIMEOUT_MS,
        },
        `POST ${path.tool(id, smoke.name)}`,
      );
      notApplicableIfPaymentRequired({ response }, context);
      const overRest = expectJson(
        response,
        200,
        z.object({ content: callToolResultSchema.shape.content, isError: z.boolean().optional() }).loose(),
        `POST ${path.tool(id, smoke.name)}`,
      );
      ensure(
        overRest.isError !== true,
        `POST ${path.tool(id, smoke.name)} answered a tool error: ${excerpt(textOf(overRest), 300)}`,
      );
      ensure(
        partTypes(overRest) === partTypes(overMcp),
        `the same call answers content of types [${partTypes(overMcp)}] over MCP but [${partTypes(overRest)}] over REST`,
      );
      return pass();
    },
  },
];
