import { randomBytes } from 'node:crypto';
import { ensure, excerpt, failWith, notApplicableBecause, pass } from '@sigil/plugin-api/kit';
import { findServableServer, type ServableServer } from './catalog.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { expectStatus } from './expect.ts';
import { freshSessionId, initializeRequest, McpConnection, postMcp, textOf, type McpTool } from './mcp.ts';
import { bearer, GATEWAY_AUTH, signIn } from './wallet.ts';

/**
 * Opt-in discovery (gateway spec parts 1, 2 and 4): tools/list shows the gateway's meta-tools until a
 * server is enabled through them; the enabled set belongs to the X-MCP-Session of one wallet; the
 * per-server endpoint serves one server's tools after validating it.
 */

const MCP = '/mcp';
const SESSION_HEADER = 'x-mcp-session';
const SPEC_DISCOVERY =
  'gateway spec part 1: "Discovery is opt-in: tools/list returns the gateway meta-tools by default and a server\'s tools only after that server is enabled"; part 4, tools/list';

/** The meta-tools a check needs, found by role. */
export interface MetaTools {
  enable: McpTool;
  disable: McpTool;
  listEnabled: McpTool | undefined;
  /** The argument of enable and disable that names the server. */
  serverArgument: string;
}

/** Sigil's names; other gateways are recognised by the words of their names or descriptions. */
const SIGIL_META = {
  enable: 'gateway_enable_server',
  disable: 'gateway_disable_server',
  listEnabled: 'gateway_list_enabled',
};

const words = (tool: McpTool): string[] => tool.name.toLowerCase().split(/[^a-z]+/);
const firstWord = (tool: McpTool): string =>
  (tool.description ?? '').trim().split(/\s+/)[0]?.toLowerCase() ?? '';

function findRole(
  tools: readonly McpTool[],
  sigilName: string,
  verbs: readonly string[],
): McpTool | undefined {
  return (
    tools.find((tool) => tool.name === sigilName) ??
    tools.find((tool) => verbs.some((verb) => words(tool).includes(verb))) ??
    tools.find((tool) => verbs.includes(firstWord(tool)))
  );
}

/** Finds enable and disable among the tools a fresh session lists, or ends the check not applicable. */
export function identifyMetaTools(tools: readonly McpTool[]): MetaTools {
  const enable = findRole(tools, SIGIL_META.enable, ['enable', 'activate']);
  const disable = findRole(tools, SIGIL_META.disable, ['disable', 'deactivate']);
  const listEnabled =
    tools.find((tool) => tool.name === SIGIL_META.listEnabled) ??
    tools.find((tool) => words(tool).includes('enabled') && words(tool).includes('list'));
  if (!enable || !disable) {
    notApplicableBecause(
      `tools/list of a fresh session shows no meta-tool the runner recognises as ${enable ? 'disable' : 'enable'} a server ` +
        `(looked for ${SIGIL_META.enable}/${SIGIL_META.disable}, or the words enable/activate and disable/deactivate in names and descriptions; listed: ${tools.map((t) => t.name).join(', ')})`,
    );
  }
  const properties = Object.keys((enable.inputSchema.properties ?? {}) as Record<string, unknown>);
  const required = Array.isArray(enable.inputSchema.required)
    ? (enable.inputSchema.required as string[])
    : [];
  const serverArgument =
    (required.length === 1 ? required[0] : undefined) ??
    ['serverId', 'server_id', 'server', 'id'].find((name) => properties.includes(name));
  if (serverArgument === undefined) {
    notApplicableBecause(
      `the meta-tool ${enable.name} takes no argument the runner recognises as a server id (${properties.join(', ') || 'none'})`,
    );
  }
  return { enable, disable, listEnabled, serverArgument };
}

/** Enables or disables a server through the meta-tools; the call must not be a tool error. */
export async function switchServer(
  connection: McpConnection,
  meta: MetaTools,
  serverId: string,
  on: boolean,
): Promise<string> {
  const tool = on ? meta.enable : meta.disable;
  const result = await connection.callTool(tool.name, { [meta.serverArgument]: serverId });
  const text = textOf(result);
  ensure(result.isError !== true, `${tool.name} of ${serverId} answered a tool error: ${excerpt(text, 300)}`);
  return text;
}

/**
 * The names under which a server's tools appear on /mcp once enabled: each of its tools must appear
 * namespaced (a name other than the bare one, carrying the server id and ending with the tool's name).
 */
export function namespacedTools(
  server: ServableServer,
  before: readonly McpTool[],
  after: readonly McpTool[],
): string[] {
  const old = new Set(before.map((tool) => tool.name));
  const added = after.map((tool) => tool.name).filter((name) => !old.has(name));
  const { id } = server.view;
  const isNamespaced = (name: string, tool: string) =>
    name !== tool && name.includes(id) && name.endsWith(tool);
  for (const tool of server.tools) {
    ensure(
      added.some((name) => isNamespaced(name, tool.name)),
      `after enabling ${id}, tools/list shows no namespaced form of its tool ${tool.name} (tools added: ${added.join(', ') || 'none'})`,
    );
  }
  const stray = added.filter((name) => !server.tools.some((tool) => isNamespaced(name, tool.name)));
  ensure(
    stray.length === 0,
    `after enabling ${id}, tools/list also added tools that are not ${id}'s, namespaced: ${stray.join(', ')}`,
  );
  return added;
}

const names = (tools: readonly McpTool[]): string[] => tools.map((tool) => tool.name).sort();
const sameNames = (a: readonly McpTool[], b: readonly McpTool[]): boolean =>
  JSON.stringify(names(a)) === JSON.stringify(names(b));

/** A fresh wallet signed in to the gateway, with its own X-MCP-Session. */
async function walletSession(context: DeploymentContext, session = freshSessionId()) {
  const signedIn = await signIn(context, GATEWAY_AUTH);
  return { signedIn, session, headers: { ...bearer(signedIn.token), [SESSION_HEADER]: session } };
}

export const discoveryRequirements: readonly Requirement[] = [
  {
    id: 'GW-1.discovery-opt-in',
    level: 'MUST',
    title:
      'A fresh session lists only meta-tools; a server enabled through them adds its tools, namespaced, and disabling removes them',
    spec: SPEC_DISCOVERY,
    service: 'gateway',
    check: async (context) => {
      const server = await findServableServer(context, { needSmokeTool: false });
      const { headers } = await walletSession(context);
      const connection = await McpConnection.open(context, MCP, headers);
      const fresh = await connection.listTools();
      ensure(fresh.length > 0, 'tools/list of a fresh session is empty: it must show the meta-tools');
      const meta = identifyMetaTools(fresh);
      const serverTool = fresh.find((tool) =>
        server.all.some((s) => new RegExp(`^${escapeRegExp(s.id)}[^A-Za-z0-9]`).test(tool.name)),
      );
      ensure(
        serverTool === undefined,
        `tools/list of a fresh session already shows ${serverTool?.name ?? ''}, a server's tool, before any server is enabled`,
      );
      context.evidence.note('meta-tools of a fresh session', { tools: names(fresh), roles: meta });
      await switchServer(connection, meta, server.view.id, true);
      const enabled = await connection.listTools();
      const added = namespacedTools(server, fresh, enabled);
      context.evidence.note(`tools added by enabling ${server.view.id}`, { added });
      if (meta.listEnabled) {
        const listed = textOf(await connection.callTool(meta.listEnabled.name, {}));
        ensure(
          listed.includes(server.view.id),
          `${meta.listEnabled.name} does not name ${server.view.id} after it was enabled: ${excerpt(listed, 300)}`,
        );
      }
      await switchServer(connection, meta, server.view.id, false);
      const disabled = await connection.listTools();
      ensure(
        sameNames(disabled, fresh),
        `after disabling ${server.view.id}, tools/list shows ${names(disabled).join(', ')}; expected the meta-tools again (${names(fresh).join(', ')})`,
      );
      return pass();
    },
  },
  {
    id: 'GW-2.session-bound-to-wallet',
    level: 'MUST',
    title:
      'The enabled set of an X-MCP-Session belongs to the wallet: it persists for that wallet, another wallet or session does not see it',
    spec: 'gateway spec part 2, Session: "carried by the header X-MCP-Session (state tied to wallet auth, not to MCP protocol sessions)"; part 1, opt-in discovery',
    service: 'gateway',
    check: async (context) => {
      const server = await findServableServer(context, { needSmokeTool: false });
      const owner = await walletSession(context);
      const first = await McpConnection.open(context, MCP, owner.headers);
      const fresh = await first.listTools();
      const meta = identifyMetaTools(fresh);
      await switchServer(first, meta, server.view.id, true);
      const added = namespacedTools(server, fresh, await first.listTools());
      const sees = (tools: readonly McpTool[]) => tools.some((tool) => added.includes(tool.name));
      try {
        // The positive control: the same wallet and session, in a new connection, still see the server.
        const again = await McpConnection.open(context, MCP, owner.headers);
        ensure(
          sees(await again.listTools()),
          `the same wallet and X-MCP-Session, in a new MCP connection, no longer see ${server.view.id}'s tools: the enabled set does not outlive one connection`,
        );
        const stranger = await walletSession(context, owner.session);
        const theirs = await McpConnection.open(context, MCP, stranger.headers);
        const strangerTools = await theirs.listTools();
        ensure(
          !sees(strangerTools),
          `another wallet sending the same X-MCP-Session sees ${server.view.id}'s tools (${names(strangerTools).join(', ')}): the session is not bound to the wallet`,
        );
        const otherSession = await McpConnection.open(context, MCP, {
          ...bearer(owner.signedIn.token),
          [SESSION_HEADER]: freshSessionId(),
        });
        ensure(
          !sees(await otherSession.listTools()),
          `the same wallet with another X-MCP-Session sees ${server.view.id}'s tools: the set is not per session`,
        );
      } finally {
        // Tidying up: a failure here must not replace the finding above.
        await switchServer(first, meta, server.view.id, false).catch(() => undefined);
      }
      return pass();
    },
  },
  {
    id: 'GW-4.per-server-validation',
    level: 'MUST',
    title:
      'POST /mcp/server/:serverId refuses an unknown server with 404 before any JSON-RPC, and serves a known server’s tools alone, un-namespaced',
    spec: 'gateway spec part 4: "POST /mcp/server/:serverId exposes only that server\'s tools; before accepting calls it validates that the server exists, its security filter status, and that it is runnable"; part 7',
    service: 'gateway',
    check: async (context) => {
      const unknown = `sigil-conformance-${randomBytes(6).toString('hex')}`;
      const refused = await postMcp(context, `${MCP}/server/${unknown}`, initializeRequest(1));
      expectStatus(refused.response, 404, `initialize at POST ${MCP}/server/${unknown} (no such server)`);
      const server = await findServableServer(context, { needSmokeTool: false });
      const path = `${MCP}/server/${encodeURIComponent(server.view.id)}`;
      const served = await (await McpConnection.open(context, path)).listTools();
      const expected = server.tools.map((tool) => tool.name).sort();
      ensure(
        JSON.stringify(names(served)) === JSON.stringify(expected),
        `tools/list at POST ${path} shows ${names(served).join(', ') || 'nothing'}; expected exactly ${server.view.id}'s tools as GET /api/servers/${server.view.id}/tools lists them (${expected.join(', ')})`,
      );
      const refusable = server.all.filter((view) => view.filter === 'blocked' || view.runnable === false);
      if (refusable.length === 0) {
        context.evidence.note(
          'no listed server is blocked or not runnable: those refusals were not exercised',
        );
      }
      for (const view of refusable) {
        const reply = await postMcp(
          context,
          `${MCP}/server/${encodeURIComponent(view.id)}`,
          initializeRequest(1),
        );
        const status = reply.response.status;
        const why = view.filter === 'blocked' ? 'blocked by the security filter' : 'not runnable';
        if (status < 400) {
          failWith(
            `initialize at POST ${MCP}/server/${view.id}, a server that is ${why}, answered HTTP ${status}; expected a refusal`,
          );
        }
        context.evidence.note(
          `${view.id} (${why}) is refused at its per-server endpoint with HTTP ${status}`,
        );
      }
      return pass();
    },
  },
];

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
