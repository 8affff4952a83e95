import type { IncomingMessage } from 'node:http';
import { expect } from 'chai';
import type { CheckResult } from '@sigil/plugin-api/kit';
import { runDeployment } from '../../conformance/deployment/run.ts';
import { REQUIREMENTS } from '../../conformance/requirements.ts';
import { fakeSignedInService, sendJson, startTinyServer, type TinyServer } from './support.ts';

/**
 * The gateway's MCP and REST requirements against a small gateway that is not Sigil: other meta-tool
 * names, other bodies. Conforming, it passes; each fault it can be given fails (or, for a payment,
 * makes not applicable) the requirement that is about it. Sigil itself is checked end to end in
 * deployment-cli.test.ts.
 */

interface Faults {
  /** The enabled set is keyed by X-MCP-Session alone, whoever sends it. */
  sessionsShared?: boolean;
  /** Server tools are listed before anything is enabled. */
  eagerTools?: boolean;
  /** Arguments of any size are executed. */
  noArgumentLimit?: boolean;
  /** Every server tool call asks for an x402 payment. */
  paymentRequired?: boolean;
  /** Malformed JSON crashes the handler (HTTP 500). */
  crashOnBadJson?: boolean;
  /** 2025-11-25 with protocol sessions: initialize mints an Mcp-Session-Id, every later request needs it. */
  legacySessions?: boolean;
  /** No 2026-07-28 at all: `_meta` is ignored and server/discover is unknown, as on a 2025-only gateway. */
  no2026?: boolean;
  /** server/discover is not served at 2026-07-28. */
  noDiscover?: boolean;
  /** Results at 2026-07-28 carry no resultType. */
  noResultType?: boolean;
  /** Lists at 2026-07-28 carry no ttlMs nor cacheScope. */
  noCacheHints?: boolean;
  /** Results at 2026-07-28 do not name the server in `_meta`. */
  noServerInfo?: boolean;
  /** At 2026-07-28 every answer mints an Mcp-Session-Id, or a request naming one not issued is 404. */
  modernSessions?: 'minted' | 'required';
  /** GET on an MCP endpoint opens an event stream instead of 405. */
  getStream?: boolean;
  /** A protocol version not served crashes the handler, or is served anyway. */
  unsupportedVersion?: 'crash' | 'served';
  /** 2025-11-25 inside `_meta` is served as if it were 2026-07-28. */
  mixedServed?: boolean;
  /** MCP-Protocol-Version, Mcp-Method and Mcp-Name are not checked against the body. */
  headersIgnored?: boolean;
  /** A method not served at 2026-07-28 is -32601 on HTTP 200, as at 2025-11-25. */
  unknownMethod200?: boolean;
}

const MODERN = '2026-07-28';
const VERSION_KEY = 'io.modelcontextprotocol/protocolVersion';
const CAPABILITIES_KEY = 'io.modelcontextprotocol/clientCapabilities';
const SERVER_INFO_KEY = 'io.modelcontextprotocol/serverInfo';
const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** One JSON-RPC message to an MCP endpoint of the fake. */
interface Call {
  request: IncomingMessage;
  id: unknown;
  method: string;
  params: Record<string, unknown>;
  perServer: boolean;
}

/** An HTTP answer: status, JSON body (none for 202) and extra headers. */
type Answer = [number, unknown, Record<string, string>?];

const ECHO = {
  name: 'shout',
  description: 'Says the text back',
  inputSchema: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
};
const META = [
  { name: 'find', description: 'Search servers', inputSchema: { type: 'object', properties: {} } },
  {
    name: 'turn_on',
    description: 'Enable a server for this session',
    inputSchema: { type: 'object', properties: { server: { type: 'string' } }, required: ['server'] },
  },
  {
    name: 'turn_off',
    description: 'Disable a server for this session',
    inputSchema: { type: 'object', properties: { server: { type: 'string' } }, required: ['server'] },
  },
];
const text = (value: string) => ({ content: [{ type: 'text', text: value }] });

/**
 * A gateway with one server, `echoes`, serving `shout`; namespaced as `echoes.shout`. It speaks
 * 2026-07-28 to a request whose `_meta` claims a version (or whose header names 2026 or later) and
 * 2025-11-25 to any other.
 */
function fakeGateway(faults: Faults) {
  const enabled = new Map<string, Set<string>>();
  const issued = new Set<string>();
  const keyOf = (request: IncomingMessage) => {
    const session = String(request.headers['x-mcp-session'] ?? '');
    return faults.sessionsShared ? session : `${request.headers.authorization ?? ''}|${session}`;
  };
  const header = (request: IncomingMessage, name: string) => String(request.headers[name] ?? '');

  /** tools/list and tools/call, alike on both revisions; any other method is unknown. */
  function tools({ request, id, method, params, perServer }: Call): Answer {
    const ok = (result: unknown): Answer => [200, { jsonrpc: '2.0', id, result }];
    const error = (code: number, text: string): Answer => [
      200,
      { jsonrpc: '2.0', id, error: { code, message: text } },
    ];
    const on = enabled.get(keyOf(request)) ?? new Set<string>();
    switch (method) {
      case 'tools/list': {
        if (perServer) return ok({ tools: [ECHO] });
        const served = on.has('echoes') || faults.eagerTools ? [{ ...ECHO, name: 'echoes.shout' }] : [];
        return ok({ tools: [...META, ...served] });
      }
      case 'tools/call': {
        const name = params.name;
        if (typeof name !== 'string') return error(-32602, 'Invalid params: name');
        const args = (params.arguments ?? {}) as Record<string, unknown>;
        if (name === 'turn_on' || name === 'turn_off') {
          if (name === 'turn_on') on.add(String(args.server));
          else on.delete(String(args.server));
          enabled.set(keyOf(request), on);
          return ok(text(`enabled: ${[...on].join(',')}`));
        }
        if (name !== (perServer ? 'shout' : 'echoes.shout')) return error(-32602, `Unknown tool ${name}`);
        if (faults.paymentRequired) return [402, { error: 'payment required' }];
        if (!faults.noArgumentLimit && JSON.stringify(args).length > 100 * 1024)
          return error(-32602, 'too large');
        return ok(text(String(args.text)));
      }
      default:
        return error(-32601, 'Method not found');
    }
  }

  /** 2025-11-25 and older: initialize, then tools; with `legacySessions`, a session on every request. */
  function legacy(call: Call): Answer {
    const { request, id, method } = call;
    if (id === undefined) return [202, undefined];
    if (method === 'initialize') {
      const session = faults.legacySessions ? `fake-${issued.size + 1}` : undefined;
      if (session) issued.add(session);
      const result = {
        protocolVersion: '2025-06-18',
        capabilities: { tools: {} },
        serverInfo: { name: 'fake', version: '0' },
      };
      return [200, { jsonrpc: '2.0', id, result }, session ? { 'mcp-session-id': session } : {}];
    }
    if (faults.legacySessions) {
      const session = request.headers['mcp-session-id'];
      if (session === undefined)
        return [
          400,
          {
            jsonrpc: '2.0',
            id,
            error: { code: -32000, message: 'Bad Request: No valid session ID provided' },
          },
        ];
      if (!issued.has(String(session)))
        return [404, { jsonrpc: '2.0', id, error: { code: -32001, message: 'Session not found' } }];
    }
    return tools(call);
  }

  /** 2026-07-28: the envelope, the headers, the version; then discover or tools, decorated. */
  function modern(call: Call): Answer {
    const { request, id, method, params, perServer } = call;
    const refuse = (status: number, code: number, text: string, data?: unknown): Answer => [
      status,
      {
        jsonrpc: '2.0',
        id: id ?? null,
        error: { code, message: text, ...(data === undefined ? {} : { data }) },
      },
    ];
    const meta = params._meta;
    if (!isObject(meta) || !(VERSION_KEY in meta))
      return refuse(400, -32602, 'Invalid params: expected params._meta with the protocol version');
    if (!isObject(meta[CAPABILITIES_KEY]))
      return refuse(400, -32602, `Invalid params: expected _meta["${CAPABILITIES_KEY}"] to be an object`);
    const version = String(meta[VERSION_KEY]);
    if (!faults.headersIgnored) {
      if (header(request, 'mcp-protocol-version') !== version)
        return refuse(400, -32020, 'Header mismatch: MCP-Protocol-Version');
      if (header(request, 'mcp-method') !== method) return refuse(400, -32020, 'Header mismatch: Mcp-Method');
      if (method === 'tools/call' && header(request, 'mcp-name') !== params.name)
        return refuse(400, -32020, 'Header mismatch: Mcp-Name');
    }
    const mixed = version === '2025-11-25';
    if (version !== MODERN && !(mixed ? faults.mixedServed : faults.unsupportedVersion === 'served')) {
      if (!mixed && faults.unsupportedVersion === 'crash') return [500, { error: 'internal' }];
      return refuse(400, -32022, `Unsupported protocol version ${version}`, {
        supported: [MODERN],
        requested: version,
      });
    }
    if (faults.modernSessions === 'required' && request.headers['mcp-session-id'] !== undefined)
      return refuse(404, -32001, 'Session not found');
    if (id === undefined) return [202, undefined];
    const sessionHeaders: Record<string, string> =
      faults.modernSessions === 'minted' ? { 'mcp-session-id': `fake-${issued.size + 1}` } : {};
    const decorate = (result: Record<string, unknown>, cacheable: boolean): Answer => [
      200,
      {
        jsonrpc: '2.0',
        id,
        result: {
          ...result,
          ...(faults.noResultType ? {} : { resultType: 'complete' }),
          ...(cacheable && !faults.noCacheHints
            ? { ttlMs: 0, cacheScope: perServer ? 'public' : 'private' }
            : {}),
          _meta: faults.noServerInfo ? {} : { [SERVER_INFO_KEY]: { name: 'fake', version: '0' } },
        },
      },
      sessionHeaders,
    ];
    if (method === 'server/discover' && !faults.noDiscover)
      return decorate({ supportedVersions: [MODERN], capabilities: { tools: {} } }, true);
    if (method === 'tools/list' || method === 'tools/call') {
      const [status, reply] = tools(call);
      const result = isObject(reply) ? reply.result : undefined;
      return isObject(result) ? decorate(result, method === 'tools/list') : [status, reply, sessionHeaders];
    }
    return refuse(faults.unknownMethod200 ? 200 : 404, -32601, `Method not found: ${method}`);
  }

  function rpc(request: IncomingMessage, body: string, perServer: boolean): Answer {
    let message: { jsonrpc?: unknown; id?: unknown; method?: unknown; params?: Record<string, unknown> };
    try {
      message = JSON.parse(body) as typeof message;
    } catch {
      if (faults.crashOnBadJson) return [500, { error: 'boom' }];
      return [400, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } }];
    }
    if (
      typeof message !== 'object' ||
      message === null ||
      message.jsonrpc !== '2.0' ||
      typeof message.method !== 'string'
    ) {
      return [400, { jsonrpc: '2.0', id: null, error: { code: -32600, message: 'Invalid Request' } }];
    }
    const { id, method, params = {} } = message;
    const call = { request, id, method, params, perServer };
    const claimed = isObject(params._meta) && VERSION_KEY in params._meta;
    const modernHeader = header(request, 'mcp-protocol-version') >= MODERN;
    if (!faults.no2026 && (claimed || modernHeader)) return modern(call);
    return legacy(call);
  }

  return fakeSignedInService(
    ({ request, url, route, body }, response) => {
      if (route === 'GET /api/servers') return sendJson(response, 200, [{ id: 'echoes' }]);
      if (route === 'GET /api/servers/echoes') {
        return sendJson(response, 200, { id: 'echoes', tier: 'tool_smoke_passed', smokeTool: 'shout' });
      }
      if (route === 'GET /api/servers/echoes/tools') return sendJson(response, 200, [ECHO]);
      if (route === 'POST /api/servers/echoes/tools/shout') {
        if (faults.paymentRequired) return sendJson(response, 402, { error: 'payment required' });
        return sendJson(
          response,
          200,
          text(String((JSON.parse(body) as { arguments: { text: unknown } }).arguments.text)),
        );
      }
      const endpoint = url.pathname === '/mcp' || url.pathname === '/mcp/server/echoes';
      if (request.method === 'POST' && endpoint) {
        const [status, reply, headers = {}] = rpc(request, body, url.pathname !== '/mcp');
        if (reply === undefined) {
          response.writeHead(status, headers);
          return response.end();
        }
        response.writeHead(status, { 'content-type': 'application/json', ...headers });
        return response.end(JSON.stringify(reply));
      }
      if (endpoint && request.method === 'GET' && faults.getStream) {
        response.writeHead(200, { 'content-type': 'text/event-stream' });
        return response.end(': open\n\n');
      }
      if (endpoint) {
        response.writeHead(405, { allow: 'POST' });
        return response.end();
      }
      sendJson(response, 404, { error: 'not found' });
    },
    { authPrefix: '/api' },
  );
}

/** The requirements of MCP 2026-07-28, which apply to a gateway that speaks it. */
const MODERN_IDS = [
  'GW-4.mcp-2026-discover',
  'GW-4.mcp-2026-tools-list',
  'GW-4.mcp-2026-stateless',
  'GW-4.mcp-2026-405',
  'GW-4.mcp-2026-server-info',
  'GW-7.mcp-2026-version-errors',
  'GW-7.mcp-2026-header-mismatch',
  'GW-7.mcp-2026-method-not-found',
];

const IDS = [
  'GW-4.mcp-405',
  'GW-4.mcp-initialize',
  'GW-4.mcp-2025-stateless',
  'GW-4.mcp-initialized-notification',
  'GW-7.jsonrpc-parse-error',
  'GW-7.jsonrpc-invalid-request',
  'GW-7.jsonrpc-method-not-found',
  'GW-7.jsonrpc-invalid-params',
  'GW-4.rest-servers',
  'GW-3.verification-tier',
  'GW-1.discovery-opt-in',
  'GW-2.session-bound-to-wallet',
  'GW-4.per-server-validation',
  'GW-8.argument-limit',
  'GW-1.tool-call',
  ...MODERN_IDS,
];

describe('gateway MCP and REST requirements against a gateway that is not Sigil', () => {
  let server: TinyServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  async function check(faults: Faults, ids: readonly string[] = IDS): Promise<Record<string, CheckResult>> {
    server = await startTinyServer(fakeGateway(faults));
    const report = await runDeployment(
      { runtimeUrl: server.url, gatewayUrl: server.url },
      { requirements: REQUIREMENTS.filter((requirement) => ids.includes(requirement.id)) },
    );
    return Object.fromEntries(report.results.map((result) => [result.id, result]));
  }

  it('every requirement passes on a conforming gateway with other names and bodies', async () => {
    const results = await check({});
    const notPassed = Object.values(results).filter((result) => result.status !== 'pass');
    expect(notPassed.map((result) => `${result.id}: ${result.reason}`)).to.deep.equal([]);
    expect(Object.keys(results)).to.have.length(IDS.length);
  });

  it('fails GW-2.session-bound-to-wallet when another wallet sees a session’s servers', async () => {
    const results = await check({ sessionsShared: true }, ['GW-2.session-bound-to-wallet']);
    expect(results['GW-2.session-bound-to-wallet']).to.include({ status: 'fail' });
    expect(results['GW-2.session-bound-to-wallet']?.reason).to.match(
      /another wallet .* not bound to the wallet/,
    );
  });

  it('fails GW-1.discovery-opt-in when server tools are listed before anything is enabled', async () => {
    const results = await check({ eagerTools: true }, ['GW-1.discovery-opt-in']);
    expect(results['GW-1.discovery-opt-in']).to.include({ status: 'fail' });
    expect(results['GW-1.discovery-opt-in']?.reason).to.match(/already shows echoes\.shout/);
  });

  it('fails GW-8.argument-limit when oversized arguments run', async () => {
    const results = await check({ noArgumentLimit: true }, ['GW-8.argument-limit']);
    expect(results['GW-8.argument-limit']).to.include({ status: 'fail' });
    expect(results['GW-8.argument-limit']?.reason).to.match(/was not refused with a JSON-RPC error: it ran/);
  });

  it('reports tool calls that ask for a payment as not applicable, not failed', async () => {
    const results = await check({ paymentRequired: true }, ['GW-8.argument-limit', 'GW-1.tool-call']);
    for (const id of ['GW-8.argument-limit', 'GW-1.tool-call']) {
      expect(results[id], id).to.include({ status: 'not-applicable' });
      expect(results[id]?.reason, id).to.match(/x402 payment .*HTTP 402/);
    }
  });

  it('reports the 2026-07-28 requirements not applicable on a gateway that speaks only 2025-11-25', async () => {
    const results = await check({ no2026: true }, [...MODERN_IDS, 'GW-4.mcp-2025-stateless']);
    expect(results['GW-4.mcp-2025-stateless']).to.include({ status: 'pass' });
    for (const id of MODERN_IDS) {
      expect(results[id], id).to.include({ status: 'not-applicable' });
      expect(results[id]?.reason, id).to.match(
        /^the gateway does not serve MCP 2026-07-28 .*server\/discover .* answered HTTP 200 with JSON-RPC error -32601 .*, and tools\/list a result without resultType$/,
      );
    }
  });

  /** Each fault, the requirement it breaks, and the reason that must say so. */
  const FAULTY: [string, Faults, string, RegExp][] = [
    [
      'a 2025-11-25 request needs initialize and its session',
      { legacySessions: true },
      'GW-4.mcp-2025-stateless',
      /no initialize before it: JSON-RPC error -32000 \(Bad Request: No valid session ID provided\)$/,
    ],
    [
      'server/discover is not served',
      { noDiscover: true },
      'GW-4.mcp-2026-discover',
      /^server\/discover \(MCP 2026-07-28\) at POST \/mcp: JSON-RPC error -32601 /,
    ],
    [
      'tools/list has no resultType',
      { noResultType: true },
      'GW-4.mcp-2026-tools-list',
      /tools\/list \(MCP 2026-07-28\) at POST \/mcp: the result has no resultType/,
    ],
    [
      'tools/list has no cache hints',
      { noCacheHints: true },
      'GW-4.mcp-2026-tools-list',
      /the tools\/list result \(MCP 2026-07-28\) has no ttlMs; MCP 2026-07-28 requires ttlMs and cacheScope/,
    ],
    [
      'a 2026-07-28 answer mints an Mcp-Session-Id',
      { modernSessions: 'minted' },
      'GW-4.mcp-2026-stateless',
      /answered with Mcp-Session-Id: fake-\d+; MCP 2026-07-28 has no protocol sessions/,
    ],
    [
      'an Mcp-Session-Id never issued is refused at 2026-07-28',
      { modernSessions: 'required' },
      'GW-4.mcp-2026-stateless',
      /an Mcp-Session-Id the gateway never issued: JSON-RPC error -32001 \(Session not found\)$/,
    ],
    [
      'GET opens an event stream',
      { getStream: true },
      'GW-4.mcp-2026-405',
      /^GET \/mcp with MCP-Protocol-Version 2026-07-28: expected HTTP 405, got 200/,
    ],
    [
      'results do not name the server',
      { noServerInfo: true },
      'GW-4.mcp-2026-server-info',
      /^server\/discover \(MCP 2026-07-28\) at POST \/mcp: the result has no _meta\["io\.modelcontextprotocol\/serverInfo"\]$/,
    ],
    [
      'a version not served crashes the handler',
      { unsupportedVersion: 'crash' },
      'GW-7.mcp-2026-version-errors',
      /^tools\/list naming protocol version 2099-01-01 .*: the gateway answered HTTP 500, a server error, instead of HTTP 400 with JSON-RPC error -32022$/,
    ],
    [
      'a version not served is served anyway',
      { unsupportedVersion: 'served' },
      'GW-7.mcp-2026-version-errors',
      /^tools\/list naming protocol version 2099-01-01 .* was accepted: it answered a result \(HTTP 200\)/,
    ],
    [
      '2025-11-25 inside _meta is served',
      { mixedServed: true },
      'GW-7.mcp-2026-version-errors',
      /^tools\/list naming 2025-11-25 inside _meta .* was accepted: it answered a result/,
    ],
    [
      'the standard headers are not checked',
      { headersIgnored: true },
      'GW-7.mcp-2026-header-mismatch',
      /^tools\/list without the MCP-Protocol-Version header was accepted: it answered a result/,
    ],
    [
      'an unknown method is answered on HTTP 200',
      { unknownMethod200: true },
      'GW-7.mcp-2026-method-not-found',
      /JSON-RPC error -32601 came with HTTP 200, expected HTTP 404$/,
    ],
  ];
  for (const [what, faults, id, reason] of FAULTY) {
    it(`fails ${id} when ${what}, saying so`, async () => {
      const results = await check(faults, [id]);
      expect(results[id], id).to.include({ status: 'fail' });
      expect(results[id]?.reason, id).to.match(reason);
    });
  }

  it('fails GW-7.jsonrpc-parse-error on a 500, saying so', async () => {
    const results = await check({ crashOnBadJson: true }, ['GW-7.jsonrpc-parse-error']);
    expect(results['GW-7.jsonrpc-parse-error']).to.include({ status: 'fail' });
    expect(results['GW-7.jsonrpc-parse-error']?.reason).to.match(/HTTP 500, a server error/);
  });
});
