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
}

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

/** A gateway with one server, `echoes`, serving `shout`; namespaced as `echoes.shout`. */
function fakeGateway(faults: Faults) {
  const enabled = new Map<string, Set<string>>();
  const keyOf = (request: IncomingMessage) => {
    const session = String(request.headers['x-mcp-session'] ?? '');
    return faults.sessionsShared ? session : `${request.headers.authorization ?? ''}|${session}`;
  };

  function rpc(request: IncomingMessage, body: string, perServer: boolean): [number, unknown] {
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
    if (id === undefined) return [202, undefined];
    const ok = (result: unknown): [number, unknown] => [200, { jsonrpc: '2.0', id, result }];
    const error = (code: number, text: string): [number, unknown] => [
      200,
      { jsonrpc: '2.0', id, error: { code, message: text } },
    ];
    const on = enabled.get(keyOf(request)) ?? new Set<string>();
    switch (method) {
      case 'initialize':
        return ok({
          protocolVersion: '2025-06-18',
          capabilities: { tools: {} },
          serverInfo: { name: 'fake', version: '0' },
        });
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
      if (request.method === 'POST' && (url.pathname === '/mcp' || url.pathname === '/mcp/server/echoes')) {
        const [status, reply] = rpc(request, body, url.pathname !== '/mcp');
        if (reply === undefined) {
          response.writeHead(status);
          return response.end();
        }
        return sendJson(response, status, reply);
      }
      if (url.pathname === '/mcp') {
        response.writeHead(405, { allow: 'POST' });
        return response.end();
      }
      sendJson(response, 404, { error: 'not found' });
    },
    { authPrefix: '/api' },
  );
}

const IDS = [
  'GW-4.mcp-405',
  'GW-4.mcp-initialize',
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

  it('fails GW-7.jsonrpc-parse-error on a 500, saying so', async () => {
    const results = await check({ crashOnBadJson: true }, ['GW-7.jsonrpc-parse-error']);
    expect(results['GW-7.jsonrpc-parse-error']).to.include({ status: 'fail' });
    expect(results['GW-7.jsonrpc-parse-error']?.reason).to.match(/HTTP 500, a server error/);
  });
});
