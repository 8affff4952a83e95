import {
  ProgressTokenSchema,
  type CallToolResult,
  type JSONRPCNotification,
  type Tool,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { isSigilError, SigilError } from '@sigil/plugin-api';
import { jsonRpcErrorOf, UNKNOWN_TOOL, withHint } from '../../../core/http/mcp-errors.ts';
import type { CallObserver, InputRetry, ToolCallOutcome } from '../../../core/mcp/call-tool.ts';
import type { Catalog } from '../catalog.ts';
import type { ResolvedServer, ServerDirectory } from '../servers.ts';
import type { EnabledServers } from '../enabled-servers.ts';
import { NAMESPACE_SEPARATOR, toolError, type ToolCaller } from '../tool-calls.ts';
import type { McpRequestScope, McpToolSource } from './dispatcher.ts';
import { LOG_LEVELS, type Revision } from './revision.ts';
import { checkPayloadSize } from '../tool-arguments.ts';

export { NAMESPACE_SEPARATOR };

const serverIdInput: Tool['inputSchema'] = {
  type: 'object',
  properties: { serverId: { type: 'string', description: 'Id from gateway_search_servers' } },
  required: ['serverId'],
};

/** The gateway's own tools: always listed on /mcp, always free. */
export const META_TOOLS: Tool[] = [
  {
    name: 'gateway_search_servers',
    description: 'Search the MCP servers this gateway can run. An empty query lists them all.',
    inputSchema: { type: 'object', properties: { query: { type: 'string' } } },
  },
  {
    name: 'gateway_describe_server',
    description:
      'Details of one MCP server: package, verification, security filter, tools, required secrets.',
    inputSchema: serverIdInput,
  },
  {
    name: 'gateway_enable_server',
    description:
      "Enable an MCP server for this session: its tools then appear in tools/list as '<serverId>__<tool>'. Needs wallet auth to persist.",
    inputSchema: serverIdInput,
  },
  {
    name: 'gateway_disable_server',
    description: 'Disable an MCP server for this session; its tools leave tools/list.',
    inputSchema: serverIdInput,
  },
  {
    name: 'gateway_list_enabled',
    description: 'The MCP servers enabled in this session.',
    inputSchema: { type: 'object', properties: {} },
  },
];

const META_NAMES = new Set(META_TOOLS.map((tool) => tool.name));
const serverIdArgs = z.object({ serverId: z.string().min(1).max(63) });
const searchArgs = z.object({ query: z.string().max(200).default('') });

const jsonResult = (value: unknown): CallToolResult => ({
  content: [{ type: 'text', text: JSON.stringify(value, null, 2) }],
  structuredContent: value as Record<string, unknown>,
});

/** What MCP clients see: meta-tools for discovery, then the namespaced tools of enabled servers. */
export class GatewayTools implements McpToolSource {
  constructor(
    private readonly deps: {
      catalog: Catalog;
      servers: ServerDirectory;
      enabled: EnabledServers;
      caller: ToolCaller;
    },
  ) {}

  async listTools(scope: McpRequestScope): Promise<Tool[]> {
    if (scope.server !== undefined) return scope.server.details.tools;
    const enabled = await this.deps.enabled.list(scope.wallet, scope.sessionId);
    const served = await Promise.all(
      enabled
        .filter((id) => this.deps.catalog.get(id))
        .map(async (id) =>
          (await this.deps.servers.describe(id)).tools.map((tool) => ({
            ...tool,
            name: `${id}${NAMESPACE_SEPARATOR}${tool.name}`,
          })),
        ),
    );
    return [...META_TOOLS, ...served.flat()];
  }

  async callTool(
    scope: McpRequestScope,
    name: string,
    args: Record<string, unknown>,
    retry?: InputRetry,
  ): Promise<ToolCallOutcome> {
    try {
      if (scope.server !== undefined)
        return await this.callServerTool(scope, scope.server.entry.id, name, args, retry, scope.server);
      if (META_NAMES.has(name)) {
        // Free, but not unbounded: the same limit as a server tool's arguments, and the same refusal.
        checkPayloadSize(args, scope.meta);
        return await this.callMetaTool(scope, name, args);
      }
      const at = name.indexOf(NAMESPACE_SEPARATOR);
      if (at <= 0) throw unknownTool(`Unknown tool: ${name}`);
      const serverId = name.slice(0, at);
      if (!(await this.deps.enabled.includes(scope.wallet, scope.sessionId, serverId))) {
        throw unknownTool(
          `Unknown tool: ${name} (server "${serverId}" is not enabled in this session; call gateway_enable_server first)`,
        );
      }
      return await this.callServerTool(
        scope,
        serverId,
        name.slice(at + NAMESPACE_SEPARATOR.length),
        args,
        retry,
      );
    } catch (err) {
      return toolFailure(err);
    }
  }

  /**
   * A server's tool (`admitted`: the server, when this request has already admitted it); a refusal by
   * the gateway is a tool error proven as a result is. A 2026-07-28 client's call tells a modern
   * server its capabilities and log level, and may be answered (and retried after) `input_required`.
   */
  private async callServerTool(
    scope: McpRequestScope,
    serverId: string,
    tool: string,
    args: Record<string, unknown>,
    retry: InputRetry | undefined,
    admitted?: ResolvedServer,
  ): Promise<ToolCallOutcome> {
    const { revision } = scope;
    const call = {
      serverId,
      ...(admitted && { admitted }),
      tool,
      arguments: args,
      wallet: scope.wallet,
      meta: scope.meta,
      origin: scope.origin,
      ...(scope.notify && {
        observer: forwarding(scope.notify, scope.meta?.progressToken, scope.revision),
      }),
      ...(revision.era === 'modern' && {
        modernClient: {
          clientCapabilities: revision.clientCapabilities,
          ...(revision.logLevel !== undefined && { logLevel: revision.logLevel }),
        },
        ...(retry && { retry }),
      }),
    };
    try {
      return await this.deps.caller.call(call, scope.disconnection);
    } catch (err) {
      // Protocol errors, payments and retries stay JSON-RPC errors (toolFailure throws them).
      return this.deps.caller.refused(call, toolFailure(err));
    }
  }

  /**
   * Adds or removes a server from a wallet's persisted set; a 2025-11-25 client with an open stream
   * hears that its tool list changed before the result (there is no other stream to tell it on: see
   * endpoint.ts). MCP 2026-07-28 sends change notifications only on a `subscriptions/listen` stream,
   * which the gateway does not serve: those clients list again (the list is never cached).
   */
  private async changeEnabled(
    scope: McpRequestScope & { wallet: string },
    serverId: string,
    enable: boolean,
  ): Promise<readonly string[]> {
    const { wallet, sessionId } = scope;
    const notify = scope.revision.era === 'legacy' ? scope.notify : undefined;
    const before = notify && (await this.deps.enabled.list(wallet, sessionId));
    const after = await this.deps.enabled.change(wallet, sessionId, serverId, enable);
    if (notify && before?.includes(serverId) !== after.includes(serverId))
      notify({ jsonrpc: '2.0', method: 'notifications/tools/list_changed' });
    return after;
  }

  private async callMetaTool(
    scope: McpRequestScope,
    name: string,
    args: Record<string, unknown>,
  ): Promise<CallToolResult> {
    if (name === 'gateway_search_servers') {
      const { query } = parseArgs(searchArgs, args);
      const details = await Promise.all(
        this.deps.catalog.search(query).map((entry) => this.deps.servers.describe(entry.id)),
      );
      return jsonResult({
        servers: details.map((d) => ({
          id: d.id,
          title: d.title,
          description: d.description,
          package: d.package,
          filter: d.filter.status,
          tier: d.tier,
        })),
      });
    }
    if (name === 'gateway_list_enabled')
      return jsonResult({ enabled: await this.deps.enabled.list(scope.wallet, scope.sessionId) });
    const { serverId } = parseArgs(serverIdArgs, args);
    if (name === 'gateway_describe_server') return jsonResult(await this.deps.servers.describe(serverId));
    if (name === 'gateway_enable_server') {
      const { details } = await this.deps.servers.admit(serverId);
      const tools = details.tools.map((tool) => `${serverId}${NAMESPACE_SEPARATOR}${tool.name}`);
      if (scope.wallet === undefined) {
        return jsonResult({
          enabled: [serverId],
          persisted: false,
          tools,
          note:
            'Anonymous: enabled for this request only. Authenticate (wallet token or JWT) to keep it, or use POST /mcp/server/' +
            serverId,
        });
      }
      return jsonResult({
        enabled: await this.changeEnabled({ ...scope, wallet: scope.wallet }, serverId, true),
        persisted: true,
        tools,
      });
    }
    this.deps.catalog.require(serverId);
    if (scope.wallet === undefined) return jsonResult({ enabled: [], persisted: false });
    return jsonResult({
      enabled: await this.changeEnabled({ ...scope, wallet: scope.wallet }, serverId, false),
      persisted: true,
    });
  }
}

/**
 * Forwards a server's progress (under the client's own progress token, when it sent one: without
 * one the server is not asked) and log messages to the client's stream: all of them to a 2025-11-25
 * client (no session remembers its level), and to a 2026-07-28 one those at or above the level its
 * request's `_meta` names, none without one (the spec forbids them).
 */
function forwarding(
  notify: (notification: JSONRPCNotification) => void,
  progressToken: unknown,
  revision: Revision,
): CallObserver {
  const token = ProgressTokenSchema.safeParse(progressToken);
  const threshold =
    revision.era === 'legacy' ? 0 : revision.logLevel === undefined ? undefined : severity(revision.logLevel);
  return {
    ...(token.success && {
      onProgress: (progress) =>
        notify({
          jsonrpc: '2.0',
          method: 'notifications/progress',
          params: { ...progress, progressToken: token.data },
        }),
    }),
    ...(threshold !== undefined && {
      onLog: (message) => {
        if (threshold === 0 || severity(message.level) >= threshold)
          notify({ jsonrpc: '2.0', method: 'notifications/message', params: message });
      },
    }),
  };
}

/** A log level's rank, least severe (debug) first; an unknown level ranks as the most severe. */
function severity(level: string): number {
  const rank = (LOG_LEVELS as readonly string[]).indexOf(level);
  return rank === -1 ? LOG_LEVELS.length : rank;
}

function parseArgs<S extends z.ZodType>(schema: S, args: Record<string, unknown>): z.infer<S> {
  const parsed = schema.safeParse(args);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  throw new SigilError(
    'invalid_request',
    `Invalid arguments: ${issue ? `${issue.path.join('.')}: ${issue.message}` : 'rejected'}`,
  );
}

const unknownTool = (message: string) =>
  new SigilError('not_found', message, { details: { reason: UNKNOWN_TOOL } });

/**
 * A refusal by the gateway (blocked, quarantined, not runnable) as the tool error a model can read and
 * act on; what MCP_ANSWER_BY_CODE makes a JSON-RPC error (a protocol mistake, a payment, a retry) is
 * thrown on to the dispatcher, as is anything that is no SigilError.
 */
function toolFailure(err: unknown): CallToolResult {
  if (isSigilError(err) && jsonRpcErrorOf(err) === undefined) return toolError(withHint(err));
  throw err;
}
