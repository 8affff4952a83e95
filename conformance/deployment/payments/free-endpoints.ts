import { ensure, pass } from '@sigil/plugin-api/kit';
import { z } from 'zod';
import { listServerIds, path } from '../catalog.ts';
import type { Requirement } from '../context.ts';
import { CALL_TIMEOUT_MS, freshSessionId, McpConnection, sampleArguments, type McpReply } from '../mcp.ts';
import { requiredOfMcp } from '../payer.ts';
import { HEADER } from '../../x402.ts';
import { failed, perServer, type Json } from './messages.ts';
import { CONFIG, SPEC_COST } from './spec.ts';

/**
 * Everything but a tool call and a proof's verification is free: REST reads, sign-in, MCP listing
 * and the meta-tools.
 */
export const freeEndpointsRequirement: Requirement = {
  id: 'GW-4.x402-free-endpoints',
  level: 'MUST',
  title:
    'Free endpoints never ask for a payment: GET /health, /api/servers, /api/servers/:id, /api/servers/:id/tools, /api/payments/config, /api/auth/challenge, and MCP initialize, tools/list and every meta-tool',
  spec: `${SPEC_COST}; part 4: GET /health, /api/servers…, /api/auth/challenge, /api/payments/config are "free"`,
  service: 'gateway',
  check: async (context) => {
    const asked: string[] = [];
    const ids = await listServerIds(context);
    const id = ids[0];
    const paths = [
      '/health',
      path.servers,
      ...(id === undefined ? [] : [path.server(id), path.tools(id)]),
      CONFIG,
      `/api/auth/challenge?address=0x000000000000000000000000000000000000dEaD`,
    ];
    for (const where of paths) {
      const response = await context.http.request({
        service: 'gateway',
        path: where,
        timeoutMs: CALL_TIMEOUT_MS,
      });
      if (response.status === 402 || response.headers.get(HEADER.required) !== null)
        asked.push(`GET ${where.split('?')[0]} (HTTP ${response.status})`);
    }
    const mcpAsks = (reply: McpReply): boolean =>
      reply.response.status === 402 ||
      requiredOfMcp(reply) !== undefined ||
      (failed(reply.response, reply.message) &&
        /payment[ _-]?required|x402/i.test(JSON.stringify(reply.message ?? '')));
    const connection = await McpConnection.open(context, '/mcp', { 'x-mcp-session': freshSessionId() });
    const listed = await connection.send('tools/list', {});
    if (mcpAsks(listed)) asked.push('tools/list at POST /mcp');
    const tools = z
      .object({
        result: z.object({
          tools: z.array(
            z.object({ name: z.string(), inputSchema: z.record(z.string(), z.unknown()).optional() }).loose(),
          ),
        }),
      })
      .safeParse(listed.message);
    ensure(tools.success, `tools/list at POST /mcp did not answer a list of tools`);
    // A fresh session lists meta-tools only (GW-1.discovery-opt-in): each is called, with the server's id where it takes one.
    for (const meta of tools.data.result.tools) {
      const schema = meta.inputSchema ?? { type: 'object' };
      const properties = Object.keys((schema.properties ?? {}) as Json);
      const serverArgument = ['serverId', 'server_id', 'server', 'id'].find((name) =>
        properties.includes(name),
      );
      const args = {
        ...sampleArguments(schema),
        ...(serverArgument && id !== undefined ? { [serverArgument]: id } : {}),
      };
      const reply = await connection.send(
        'tools/call',
        { name: meta.name, arguments: args },
        CALL_TIMEOUT_MS,
      );
      if (mcpAsks(reply)) asked.push(`the meta-tool ${meta.name} (tools/call at POST /mcp)`);
    }
    context.evidence.note(
      `called ${tools.data.result.tools.length} meta-tool(s): ${tools.data.result.tools.map((t) => t.name).join(', ')}`,
    );
    if (id !== undefined) {
      const single = await McpConnection.open(context, perServer(id));
      if (mcpAsks(await single.send('tools/list', {}))) asked.push(`tools/list at POST ${perServer(id)}`);
    }
    ensure(asked.length === 0, `free endpoints asked for a payment: ${asked.join('; ')}`);
    return pass();
  },
};
