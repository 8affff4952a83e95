import { z } from 'zod';
import { ensure, expectShape, failWith, OutcomeSignal, pass } from '@sigil/plugin-api/kit';
import { findServableServer, type ServableServer } from './catalog.ts';
import type { DeploymentContext, Requirement } from './context.ts';
import { identifyMetaTools, namespacedTools, switchServer } from './discovery.ts';
import {
  describeReply,
  expectCompleteResult,
  expectJsonRpcError,
  expectMethodNotAllowed,
  freshSessionId,
  jsonRpcErrorSchema,
  jsonRpcResultSchema,
  McpConnection,
  MODERN_META,
  MODERN_PROTOCOL_VERSION,
  modernRequest,
  postMcp,
  postModern,
  toolNames,
  toolNamesSchema,
  type JsonRpcErrorReply,
  type McpReply,
} from './mcp.ts';
import { bearer, GATEWAY_AUTH, signIn } from './wallet.ts';

/**
 * MCP 2026-07-28 beside 2025-11-25 (gateway spec parts 1, 4 and 7; MCP 2026-07-28): no handshake and
 * no protocol session, `server/discover`, results that say they are complete and how long they keep,
 * 405 on GET and DELETE, and the HTTP 400 / 404 refusals of the revision's validation. The gateway spec
 * names no revision, so these apply only to a gateway that speaks 2026-07-28 (the `mcp-2026` feature:
 * it answers `server/discover`, or a `tools/list` with a `resultType`); one that does is held to all.
 */

const MCP = '/mcp';
const V = MODERN_PROTOCOL_VERSION;
const SPEC = `MCP ${V}`;
const SPEC_STATELESS = 'gateway spec part 1: "a stateless MCP endpoint"';
const SPEC_HTTP = `${SPEC}, Streamable HTTP`;
const FEATURES = ['mcp-2026'] as const;

const discoverSchema = z.object({
  supportedVersions: z.array(z.string()).min(1),
  capabilities: z.record(z.string(), z.unknown()),
  instructions: z.string().optional(),
});
const serverInfoSchema = z.object({ name: z.string().min(1), version: z.string().min(1) }).loose();
const unsupportedSchema = z.object({ supported: z.array(z.string()), requested: z.string() }).loose();

/** Caching hints (MCP 2026-07-28, caching): a whole `ttlMs` of at least 0 and a `cacheScope`. */
function expectCacheHints(result: Record<string, unknown>, what: string): void {
  const { ttlMs, cacheScope } = result;
  ensure(
    ttlMs !== undefined && cacheScope !== undefined,
    `${what} has no ${ttlMs === undefined ? 'ttlMs' : 'cacheScope'}; ${SPEC} requires ttlMs and cacheScope on it`,
  );
  ensure(
    typeof ttlMs === 'number' && Number.isInteger(ttlMs) && ttlMs >= 0,
    `${what}: ttlMs is ${JSON.stringify(ttlMs)}, expected a whole number of milliseconds, 0 or more`,
  );
  ensure(
    cacheScope === 'public' || cacheScope === 'private',
    `${what}: cacheScope is ${JSON.stringify(cacheScope)}, expected "public" or "private"`,
  );
}

/** 2026-07-28 has no protocol sessions: a server must neither mint nor echo an Mcp-Session-Id. */
function expectNoSessionId(reply: McpReply, what: string): void {
  const session = reply.response.headers.get('mcp-session-id');
  ensure(
    session === null,
    `${what} answered with Mcp-Session-Id: ${session}; ${SPEC} has no protocol sessions, so a server neither mints nor echoes one`,
  );
}

/**
 * A refusal: `status` with a JSON-RPC error, `code` when the revision fixes one. A result or a 5xx
 * says what came instead.
 */
function expectRefusal(
  reply: McpReply,
  status: number,
  code: number | undefined,
  what: string,
): JsonRpcErrorReply {
  const expected = `HTTP ${status} with JSON-RPC error ${code ?? '(a standard one)'}`;
  const got = reply.response.status;
  ensure(got < 500, `${what}: the gateway answered HTTP ${got}, a server error, instead of ${expected}`);
  if (jsonRpcResultSchema.safeParse(reply.message).success) {
    failWith(`${what} was accepted: it answered a result (HTTP ${got}); expected ${expected}`);
  }
  const error =
    code === undefined
      ? expectShape(
          jsonRpcErrorSchema,
          reply.message,
          `${what}: expected ${expected}, got ${describeReply(reply)}`,
        )
      : expectJsonRpcError(reply, code, what);
  ensure(
    got === status,
    `${what}: JSON-RPC error ${error.error.code} came with HTTP ${got}, expected HTTP ${status}`,
  );
  return error;
}

/** A 2026-07-28 tools/list at `path` that must succeed: the positive control before a refusal. */
async function modernToolList(context: DeploymentContext, path = MCP) {
  const what = `tools/list (MCP ${V}) at POST ${path}`;
  const result = expectCompleteResult(await postModern(context, path, 'tools/list'), what);
  return { result, tools: expectShape(toolNamesSchema, result, `${what}: the result`).tools };
}

/** A servable server for a check's optional part, or undefined with a note saying why there is none. */
async function servableOrNote(context: DeploymentContext, part: string): Promise<ServableServer | undefined> {
  try {
    return await findServableServer(context, { needSmokeTool: false });
  } catch (err) {
    if (!(err instanceof OutcomeSignal) || err.outcome.status !== 'not-applicable') throw err;
    context.evidence.note(`${part} left out: ${err.outcome.reason}`);
    return undefined;
  }
}

export const mcp2026Requirements: readonly Requirement[] = [
  {
    id: 'GW-4.mcp-2026-discover',
    level: 'MUST',
    title: `server/discover answers, with no handshake before it, the versions served (${V} among them), the capabilities (tools), resultType "complete" and cache hints`,
    spec: `${SPEC}, server/discover: "Servers MUST implement it"; versioning; caching ("Servers MUST include caching hints" on server/discover); basic, Result.resultType; gateway spec part 4, MCP endpoints`,
    service: 'gateway',
    features: FEATURES,
    check: async (context) => {
      const id = 'sigil-conformance-discover';
      const reply = await postModern(context, MCP, 'server/discover', {}, { id });
      const what = `server/discover (MCP ${V}) at POST ${MCP}`;
      const result = expectCompleteResult(reply, what);
      ensure(
        (reply.message as { id?: unknown }).id === id,
        `${what}: the result carries id ${JSON.stringify((reply.message as { id?: unknown }).id)}, not the request's "${id}"`,
      );
      const discovered = expectShape(discoverSchema, result, `${what}: the result`);
      ensure(
        discovered.supportedVersions.includes(V),
        `${what} lists supportedVersions [${discovered.supportedVersions.join(', ')}], without ${V}, the version it was just asked at and answered`,
      );
      const { tools } = discovered.capabilities;
      ensure(
        typeof tools === 'object' && tools !== null && !Array.isArray(tools),
        `${what}: capabilities.tools is ${JSON.stringify(tools)}; a tool gateway declares the tools capability as an object`,
      );
      expectCacheHints(result, `the result of ${what}`);
      return pass();
    },
  },
  {
    id: 'GW-4.mcp-2026-tools-list',
    level: 'MUST',
    title: `tools/list at ${V} lists the tools it lists at 2025-11-25, with resultType "complete", ttlMs and cacheScope`,
    spec: `${SPEC}, tools (ListToolsResult is a CacheableResult); caching: "Servers MUST include caching hints on results with resultType complete" of tools/list; basic, Result.resultType ("Servers implementing this protocol version MUST include this field"); gateway spec part 4, tools/list`,
    service: 'gateway',
    features: FEATURES,
    check: async (context) => {
      const legacy = toolNames(await (await McpConnection.open(context, MCP)).listTools());
      const { result, tools } = await modernToolList(context);
      expectCacheHints(result, `the tools/list result (MCP ${V})`);
      const modern = toolNames(tools);
      ensure(
        modern === legacy,
        `tools/list lists [${modern}] at ${V} but [${legacy}] at 2025-11-25; both revisions serve the same tools`,
      );
      return pass();
    },
  },
  {
    id: 'GW-4.mcp-2026-stateless',
    level: 'MUST',
    title: `At ${V} every request stands alone: no Mcp-Session-Id is minted, one never issued is ignored, and the enabled set lives in the wallet and X-MCP-Session alone (enabled over ${V}, seen at both revisions)`,
    spec: `${SPEC_STATELESS}; part 2, Session: "state tied to wallet auth, not to MCP protocol sessions"; ${SPEC_HTTP}, backward compatibility ("An Mcp-Session-Id header on a request: ignore it, and do not mint or echo session IDs"); versioning ("A request carrying modern per-request _meta is served statelessly")`,
    service: 'gateway',
    features: FEATURES,
    check: async (context) => {
      const first = await postModern(context, MCP, 'tools/list');
      expectCompleteResult(first, `tools/list (MCP ${V}), the check's first request`);
      expectNoSessionId(first, `tools/list (MCP ${V})`);
      const stray = await postModern(
        context,
        MCP,
        'tools/list',
        {},
        {
          headers: { 'mcp-session-id': freshSessionId() },
        },
      );
      const strayWhat = `tools/list (MCP ${V}) with an Mcp-Session-Id the gateway never issued`;
      expectShape(toolNamesSchema, expectCompleteResult(stray, strayWhat), `${strayWhat}: the result`);
      expectNoSessionId(stray, strayWhat);

      // The state a gateway does keep: the enabled set, by wallet and X-MCP-Session, whatever the revision.
      const server = await findServableServer(context, { needSmokeTool: false });
      const id = server.view.id;
      const signedIn = await signIn(context, GATEWAY_AUTH);
      const headers = { ...bearer(signedIn.token), 'x-mcp-session': freshSessionId() };
      const modern = McpConnection.modern(context, MCP, headers);
      const fresh = await modern.listTools();
      const meta = identifyMetaTools(fresh);
      await switchServer(modern, meta, id, true);
      try {
        const added = namespacedTools(server, fresh, await modern.listTools());
        const legacy = await (await McpConnection.open(context, MCP, headers)).listTools();
        const missing = added.filter((name) => !legacy.some((tool) => tool.name === name));
        ensure(
          missing.length === 0,
          `${id}, enabled over ${V} with X-MCP-Session, is not seen at 2025-11-25 by the same wallet and session: tools/list lacks ${missing.join(', ')}`,
        );
      } finally {
        // Tidying up: a failure here must not replace the finding above.
        await switchServer(modern, meta, id, false).catch(() => undefined);
      }
      return pass();
    },
  },
  {
    id: 'GW-4.mcp-2026-405',
    level: 'MUST',
    title: `GET and DELETE on /mcp and a per-server endpoint, as a ${V} client would send them, answer 405 with Allow: POST`,
    spec: `gateway spec part 4: "GET, DELETE /mcp return 405 (stateless)"; part 7; ${SPEC_HTTP}: "removal of the GET stream endpoint", "HTTP GET or DELETE to the MCP endpoint: respond with 405 Method Not Allowed"; RFC 9110 section 15.5.6 (Allow)`,
    service: 'gateway',
    features: FEATURES,
    check: async (context) => {
      const paths = [MCP];
      const server = await servableOrNote(context, 'the per-server endpoint');
      if (server) paths.push(`/mcp/server/${encodeURIComponent(server.view.id)}`);
      for (const path of paths) {
        // A positive control first: the same path must answer a 2026-07-28 POST, or a 405 proves nothing.
        await modernToolList(context, path);
        for (const method of ['GET', 'DELETE'] as const) {
          await expectMethodNotAllowed(
            context,
            method,
            path,
            {
              accept: 'text/event-stream',
              'mcp-protocol-version': V,
              'mcp-session-id': freshSessionId(),
              'last-event-id': '1',
            },
            `${method} ${path} with MCP-Protocol-Version ${V}`,
          );
        }
      }
      return pass();
    },
  },
  {
    id: 'GW-4.mcp-2026-server-info',
    level: 'SHOULD',
    title: `Results at ${V} name the server in _meta["${MODERN_META.serverInfo}"] (name and version)`,
    spec: `${SPEC}, basic, per-response protocol fields: "Servers SHOULD include io.modelcontextprotocol/serverInfo in every result's _meta"; server/discover`,
    service: 'gateway',
    features: FEATURES,
    check: async (context) => {
      for (const method of ['server/discover', 'tools/list']) {
        const what = `${method} (MCP ${V}) at POST ${MCP}`;
        const result = expectCompleteResult(await postModern(context, MCP, method), what);
        const meta = result._meta as Record<string, unknown> | undefined;
        ensure(
          meta?.[MODERN_META.serverInfo] !== undefined,
          `${what}: the result has no _meta["${MODERN_META.serverInfo}"]`,
        );
        expectShape(
          serverInfoSchema,
          meta[MODERN_META.serverInfo],
          `${what}: _meta["${MODERN_META.serverInfo}"]`,
        );
      }
      return pass();
    },
  },
  {
    id: 'GW-7.mcp-2026-version-errors',
    level: 'MUST',
    title: `A version not served is HTTP 400 with error -32022 listing the versions served; 2025-11-25 inside _meta, an envelope without clientCapabilities, a ${V} header without an envelope: HTTP 400 with a JSON-RPC error, never a result or a 5xx`,
    spec: `${SPEC}, versioning ("it MUST respond with an UnsupportedProtocolVersionError listing the versions it does support"); ${SPEC_HTTP}, protocol version header (400 Bad Request); basic, per-request protocol fields ("A request missing any required field is malformed… -32602… 400"); gateway spec part 7: standard JSON-RPC errors`,
    service: 'gateway',
    features: FEATURES,
    check: async (context) => {
      await modernToolList(context);
      const unknown = '2099-01-01';
      const refused = expectRefusal(
        await postModern(context, MCP, 'tools/list', {}, { version: unknown }),
        400,
        -32022,
        `tools/list naming protocol version ${unknown} (in _meta and the header)`,
      );
      const data = expectShape(unsupportedSchema, refused.error.data, 'the -32022 error data');
      ensure(
        data.supported.includes(V),
        `the -32022 error lists supported [${data.supported.join(', ')}], without ${V}, which the gateway serves`,
      );
      ensure(
        data.requested === unknown,
        `the -32022 error names requested ${JSON.stringify(data.requested)}, not ${unknown}`,
      );
      const mixed = expectRefusal(
        await postModern(context, MCP, 'tools/list', {}, { version: '2025-11-25' }),
        400,
        undefined,
        'tools/list naming 2025-11-25 inside _meta (a 2025-11-25 version in a 2026-07-28 envelope)',
      );
      context.evidence.note(`mixed revisions: JSON-RPC error ${mixed.error.code}`, {
        message: mixed.error.message,
      });
      // The envelope as a client that forgot its capabilities sends it: the version, nothing else.
      const { headers } = modernRequest(1, 'tools/list');
      expectRefusal(
        await postMcp(
          context,
          MCP,
          {
            jsonrpc: '2.0',
            id: 1,
            method: 'tools/list',
            params: { _meta: { [MODERN_META.protocolVersion]: V } },
          },
          headers,
        ),
        400,
        -32602,
        `tools/list whose _meta lacks ${MODERN_META.clientCapabilities}`,
      );
      expectRefusal(
        await postMcp(
          context,
          MCP,
          { jsonrpc: '2.0', id: 1, method: 'tools/list', params: {} },
          { 'mcp-protocol-version': V, 'mcp-method': 'tools/list' },
        ),
        400,
        undefined,
        `tools/list with MCP-Protocol-Version ${V} and no _meta envelope`,
      );
      return pass();
    },
  },
  {
    id: 'GW-7.mcp-2026-header-mismatch',
    level: 'MUST',
    title: `At ${V}, a missing MCP-Protocol-Version header, an Mcp-Method other than the method, or an Mcp-Name other than the tool is HTTP 400 with error -32020`,
    spec: `${SPEC_HTTP}, server validation: "Servers that process the request body MUST reject requests where the values specified in the headers do not match… 400 Bad Request… -32020 (HeaderMismatch)"; "A required standard header (MCP-Protocol-Version, Mcp-Method, Mcp-Name) is missing"`,
    service: 'gateway',
    features: FEATURES,
    check: async (context) => {
      await modernToolList(context);
      // A tool no gateway has, named differently in the header: refused before any tool is looked up.
      const tool = { name: 'sigil-conformance-no-such-tool', arguments: {} };
      const cases: [string, string, Record<string, unknown>, Record<string, string>][] = [
        [
          'tools/list without the MCP-Protocol-Version header',
          'tools/list',
          {},
          { 'mcp-protocol-version': '' },
        ],
        ['tools/list with Mcp-Method: tools/call', 'tools/list', {}, { 'mcp-method': 'tools/call' }],
        [
          `tools/call of ${tool.name} with Mcp-Name: sigil-conformance-other-tool`,
          'tools/call',
          tool,
          { 'mcp-name': 'sigil-conformance-other-tool' },
        ],
      ];
      for (const [what, method, params, headers] of cases) {
        expectRefusal(await postModern(context, MCP, method, params, { headers }), 400, -32020, what);
      }
      return pass();
    },
  },
  {
    id: 'GW-7.mcp-2026-method-not-found',
    level: 'MUST',
    title: `At ${V}, a method the gateway does not serve is HTTP 404 with error -32601 and the request's id`,
    spec: `${SPEC_HTTP}, protocol version header: "If the server does not implement the requested RPC method, it MUST respond with 404 Not Found and a JSON-RPC error with code -32601"; gateway spec part 7`,
    service: 'gateway',
    features: FEATURES,
    check: async (context) => {
      await modernToolList(context);
      const id = 7;
      const method = 'sigil-conformance/no-such-method';
      const error = expectRefusal(
        await postModern(context, MCP, method, {}, { id }),
        404,
        -32601,
        `${method} (MCP ${V})`,
      );
      ensure(
        error.id === id,
        `the -32601 error carries id ${JSON.stringify(error.id)}, not the request's ${id}`,
      );
      return pass();
    },
  },
];
