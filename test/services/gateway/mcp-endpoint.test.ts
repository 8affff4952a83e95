import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { expect } from 'chai';
import type { Kernel } from '../../../services/kernel.ts';
import { serve, type Serving } from '../../../services/serve.ts';
import { META_TOOLS } from '../../../services/gateway/mcp/gateway-tools.ts';
import { openTestKernel } from '../../support/kernel.ts';
import { mcpClientV2, MODERN_REVISION, modernMeta, postMcp, postModern } from './support.ts';

/** The MCP protocol surface of the gateway, with no registry or sandbox plugin loaded. */
describe('gateway MCP endpoint (protocol)', function () {
  this.timeout(30_000);
  let kernel: Kernel;
  let serving: Serving;
  let url: string;

  before(async () => {
    kernel = await openTestKernel({
      config: { gateway: { port: 0 }, plugins: [{ resolve: 'tee-none', enabled: true, options: {} }] },
    });
    serving = await serve(kernel, ['gateway']);
    url = serving.urls.gateway as string;
  });
  after(() => serving.stop());

  const rpc = (body: string, headers: Record<string, string> = {}) => postMcp(`${url}/mcp`, body, headers);
  const rpcJson = async (message: unknown) => {
    const res = await rpc(JSON.stringify(message));
    return {
      status: res.status,
      body: (await res.json()) as {
        result?: Record<string, unknown>;
        error?: { code: number; message: string };
      },
    };
  };
  const callTool = (name: string, args: Record<string, unknown>) =>
    rpcJson({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args } });

  it('serves the official SDK client: initialize, then only the meta-tools', async () => {
    const client = new Client({ name: 'test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${url}/mcp`)));
    expect(client.getServerVersion()?.name).to.equal('sigil-gateway');
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).to.deep.equal(META_TOOLS.map((t) => t.name));
    const search = await client.callTool({ name: 'gateway_search_servers', arguments: { query: 'memory' } });
    const found = (search.structuredContent as { servers: { id: string }[] }).servers.map((s) => s.id);
    expect(found).to.deep.equal(['memory']);
    await client.close();
  });

  it('answers GET and DELETE with 405 and Allow: POST', async () => {
    for (const method of ['GET', 'DELETE']) {
      const res = await fetch(`${url}/mcp`, { method });
      expect(res.status, method).to.equal(405);
      expect(res.headers.get('allow')).to.equal('POST');
    }
  });

  it('answers malformed JSON with -32700 and a non-request with -32600', async () => {
    const malformed = await rpc('{"jsonrpc": "2.0", "id": 1,');
    expect(malformed.status).to.equal(400);
    expect(((await malformed.json()) as { error: { code: number } }).error.code).to.equal(-32700);
    for (const bad of [
      { jsonrpc: '1.0', id: 1, method: 'ping' },
      { id: 1 },
      [{ jsonrpc: '2.0', id: 1, method: 'ping' }],
      42,
      { jsonrpc: '2.0', id: 1.5, method: 'ping' },
      { jsonrpc: '2.0', id: true, method: 'ping' },
      { jsonrpc: '2.0', id: 1, method: 7 },
      { jsonrpc: '2.0', id: 1, method: 'ping', extra: true },
      { jsonrpc: '2.0', id: 1, method: 'ping', params: [1] },
      { jsonrpc: '2.0', id: 1, method: 'ping', params: 'x' },
      { jsonrpc: '2.0', id: 1, method: 'ping', params: { _meta: 'not an object' } },
    ]) {
      const { status, body } = await rpcJson(bad);
      expect(status, JSON.stringify(bad)).to.equal(400);
      expect(body.error?.code, JSON.stringify(bad)).to.equal(-32600);
    }
    // What the SDK's schema accepts is a request: string ids, params with or without a valid _meta.
    for (const good of [
      { jsonrpc: '2.0', id: 'a-1', method: 'ping' },
      { jsonrpc: '2.0', id: 0, method: 'ping', params: {} },
      { jsonrpc: '2.0', id: 2, method: 'ping', params: { _meta: { progressToken: 'p' } } },
    ]) {
      const { status, body } = await rpcJson(good);
      expect(status, JSON.stringify(good)).to.equal(200);
      expect(body, JSON.stringify(good)).to.deep.equal({ jsonrpc: '2.0', id: good.id, result: {} });
    }
  });

  it('answers an unknown method with -32601 and bad params with -32602', async () => {
    expect(
      (await rpcJson({ jsonrpc: '2.0', id: 1, method: 'resources/teleport' })).body.error?.code,
    ).to.equal(-32601);
    for (const params of [
      { arguments: {} },
      { name: 5, arguments: {} },
      { name: 'gateway_list_enabled', arguments: [1] },
      { name: 'gateway_list_enabled', arguments: null },
      { name: 'gateway_list_enabled', arguments: 'x' },
      { name: 'gateway_list_enabled', task: 'not an object' },
    ]) {
      const { body } = await rpcJson({ jsonrpc: '2.0', id: 2, method: 'tools/call', params });
      expect(body.error?.code, JSON.stringify(params)).to.equal(-32602);
    }
    // What the SDK's schema accepts is accepted: no arguments, unknown members, a well-formed _meta.
    for (const params of [
      { name: 'gateway_list_enabled' },
      { name: 'gateway_list_enabled', arguments: {}, extra: true },
      { name: 'gateway_list_enabled', arguments: {}, _meta: { progressToken: 1 } },
    ]) {
      const { body } = await rpcJson({ jsonrpc: '2.0', id: 2, method: 'tools/call', params });
      expect(body.error, JSON.stringify(params)).to.equal(undefined);
    }
    expect(
      (await rpcJson({ jsonrpc: '2.0', id: 3, method: 'initialize', params: { protocolVersion: 7 } })).body
        .error?.code,
    ).to.equal(-32602);
    const unknownTool = await callTool('nope__nothing', {});
    expect(unknownTool.body.error?.code).to.equal(-32602);
    expect(unknownTool.body.error?.message).to.match(/not enabled/);
  });

  it('accepts notifications with 202 and no body', async () => {
    const res = await rpc(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
    expect(res.status).to.equal(202);
    expect(await res.text()).to.equal('');
  });

  it('refuses an unsupported MCP-Protocol-Version header, naming the revisions served', async () => {
    const res = await rpc(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }), {
      'mcp-protocol-version': '1999-01-01',
    });
    expect(res.status).to.equal(400);
    const { error } = (await res.json()) as { error: { code: number; message: string; data: unknown } };
    expect(error.code).to.equal(-32022);
    expect(error.data).to.deep.equal({ supported: ['2026-07-28'], requested: '1999-01-01' });
    expect(error.message).to.include('2025-11-25');
  });

  it('explains why a server cannot be enabled here, as a tool error', async () => {
    const { body } = await callTool('gateway_enable_server', { serverId: 'memory' });
    expect(body.result?.isError).to.equal(true);
    expect(JSON.stringify(body.result)).to.match(
      /not runnable here: no package-registry plugin for \\"npm\\"/,
    );
  });

  it('answers a server id the catalog does not hold as a tool error (not an unknown tool)', async () => {
    const { body } = await callTool('gateway_describe_server', { serverId: 'no-such-server' });
    expect(body.error).to.equal(undefined);
    expect(body.result?.isError).to.equal(true);
    expect(JSON.stringify(body.result)).to.match(/No MCP server \\"no-such-server\\" in the catalog/);
  });

  it('checks the per-server endpoint before accepting anything', async () => {
    const missing = await fetch(`${url}/mcp/server/no-such-server`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(missing.status).to.equal(404);
    const notRunnable = await fetch(`${url}/mcp/server/memory`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(notRunnable.status).to.equal(503);
    expect(((await notRunnable.json()) as { message: string }).message).to.match(/not runnable/);
  });

  describe('at MCP 2026-07-28, beside 2025-11-25', () => {
    type Answer = {
      id?: unknown;
      result?: Record<string, unknown>;
      error?: { code: number; message: string; data?: unknown };
    };
    const modern = async (
      method: string,
      params?: Record<string, unknown>,
      options?: Parameters<typeof postModern>[2],
      path = '/mcp',
    ) => {
      const res = await postModern(`${url}${path}`, { id: 7, method, ...(params && { params }) }, options);
      return { status: res.status, headers: res.headers, body: (await res.json()) as Answer };
    };

    it('serves the SDK v2 client pinned to 2026-07-28, and in auto mode, on the same endpoint as 1.x', async () => {
      for (const mode of [{ pin: MODERN_REVISION }, 'auto'] as const) {
        const client = await mcpClientV2(`${url}/mcp`, undefined, undefined, mode);
        expect(client.getProtocolEra(), JSON.stringify(mode)).to.equal('modern');
        expect(client.getServerVersion()?.name).to.equal('sigil-gateway');
        expect(client.getInstructions()).to.match(/gateway_search_servers/);
        const { tools } = await client.listTools();
        expect(tools.map((t) => t.name)).to.deep.equal(META_TOOLS.map((t) => t.name));
        const search = await client.callTool({
          name: 'gateway_search_servers',
          arguments: { query: 'memory' },
        });
        expect(
          (search.structuredContent as { servers: { id: string }[] }).servers.map((s) => s.id),
        ).to.deep.equal(['memory']);
        await client.close();
      }
    });

    it('answers server/discover with the modern revisions, capabilities, instructions and a public cache hint', async () => {
      const { status, body } = await modern('server/discover');
      expect(status).to.equal(200);
      const { result } = body;
      expect(result).to.deep.include({
        resultType: 'complete',
        supportedVersions: [MODERN_REVISION],
        capabilities: { tools: {}, logging: {} },
        ttlMs: 60_000,
        cacheScope: 'public',
      });
      expect(result?.instructions).to.match(/gateway_enable_server/);
      const info = (result?._meta as Record<string, { name: string; version: string }>)[
        'io.modelcontextprotocol/serverInfo'
      ];
      expect(info?.name).to.equal('sigil-gateway');
      expect(info?.version).to.be.a('string').and.not.equal('');
      // initialize, at 2025-11-25, names the same server with the same instructions.
      const init = await rpcJson({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'c', version: '1' } },
      });
      expect(init.body.result?.serverInfo).to.deep.equal(info);
      expect(init.body.result?.instructions).to.equal(result?.instructions);
      expect(init.body.result).to.not.have.property('resultType');
    });

    it('lists tools with resultType, the server identity, and a private cache hint of 0 (the enabled set changes)', async () => {
      const { body } = await modern('tools/list');
      expect(body.result).to.include({ resultType: 'complete', ttlMs: 0, cacheScope: 'private' });
      expect((body.result?.tools as { name: string }[]).map((t) => t.name)).to.deep.equal(
        META_TOOLS.map((t) => t.name),
      );
      expect(body.result?._meta).to.have.property('io.modelcontextprotocol/serverInfo');
      const legacy = await rpcJson({ jsonrpc: '2.0', id: 1, method: 'tools/list' });
      expect(legacy.body.result).to.have.keys('tools');
    });

    it('marks a tool result complete; tool errors and unknown tools answer as at 2025-11-25, in-band', async () => {
      const listed = await modern('tools/call', { name: 'gateway_list_enabled', arguments: {} });
      expect(listed.status).to.equal(200);
      expect(listed.body.result).to.include({ resultType: 'complete' });
      expect(listed.body.result?.structuredContent).to.deep.equal({ enabled: [] });
      const refused = await modern('tools/call', {
        name: 'gateway_enable_server',
        arguments: { serverId: 'memory' },
      });
      expect(refused.status).to.equal(200);
      expect(refused.body.result).to.include({ isError: true, resultType: 'complete' });
      const unknown = await modern('tools/call', { name: 'nope__nothing', arguments: {} });
      expect(unknown.status).to.equal(200);
      expect(unknown.body.error?.code).to.equal(-32602);
      const badParams = await modern('tools/call', { name: 'gateway_list_enabled', arguments: [1] });
      expect(badParams.status).to.equal(200);
      expect(badParams.body.error?.code).to.equal(-32602);
    });

    it('answers the methods 2026-07-28 does not have with 404 / -32601, and a legacy client still gets them', async () => {
      for (const method of [
        'initialize',
        'ping',
        'logging/setLevel',
        'resources/list',
        'subscriptions/listen',
      ]) {
        const { status, body } = await modern(method);
        expect(status, method).to.equal(404);
        expect(body.error?.code, method).to.equal(-32601);
        expect(body.id, method).to.equal(7);
      }
      const ping = await rpcJson({ jsonrpc: '2.0', id: 1, method: 'ping' });
      expect(ping).to.deep.equal({ status: 200, body: { jsonrpc: '2.0', id: 1, result: {} } });
    });

    it('refuses bad input with the ladder’s 400s, naming what was expected, never a 500', async () => {
      const cases: [string, Promise<{ status: number; body: Answer }>, number][] = [
        [
          'no clientCapabilities',
          modern('tools/list', undefined, {
            meta: { 'io.modelcontextprotocol/clientCapabilities': undefined },
          }),
          -32602,
        ],
        [
          '2025-11-25 in _meta (mixed revisions)',
          modern('tools/list', undefined, {
            meta: { 'io.modelcontextprotocol/protocolVersion': '2025-11-25' },
            headers: { 'mcp-protocol-version': '2025-11-25' },
          }),
          -32022,
        ],
        [
          'header ≠ _meta',
          modern('tools/list', undefined, { headers: { 'mcp-protocol-version': '2025-11-25' } }),
          -32020,
        ],
        [
          'Mcp-Method ≠ method',
          modern('tools/list', undefined, { headers: { 'mcp-method': 'tools/call' } }),
          -32020,
        ],
        [
          'no MCP-Protocol-Version',
          modern('tools/list', undefined, { headers: { 'mcp-protocol-version': '' } }),
          -32020,
        ],
        ['no Mcp-Method', modern('tools/list', undefined, { headers: { 'mcp-method': '' } }), -32020],
        [
          'no Mcp-Name',
          modern(
            'tools/call',
            { name: 'gateway_list_enabled', arguments: {} },
            { headers: { 'mcp-name': '' } },
          ),
          -32020,
        ],
      ];
      for (const [what, answer, code] of cases) {
        const { status, body } = await answer;
        expect(status, what).to.equal(400);
        expect(body.error?.code, what).to.equal(code);
      }
      const noEnvelope = await rpc(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }), {
        'mcp-protocol-version': MODERN_REVISION,
      });
      expect(noEnvelope.status).to.equal(400);
      const missing = (await noEnvelope.json()) as Answer;
      expect(missing.error?.code).to.equal(-32602);
      expect(missing.error?.message).to.match(/expected params\._meta/);
      const batch = await rpc(
        JSON.stringify([{ jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: modernMeta() } }]),
        { 'mcp-protocol-version': MODERN_REVISION },
      );
      expect(batch.status).to.equal(400);
      expect(((await batch.json()) as Answer).error?.code).to.equal(-32600);
      // Odd values in every member the envelope has: 4xx, never 500.
      const odd = [null, 7, 'x', [], {}, { sampling: 'yes' }];
      for (const key of [
        'io.modelcontextprotocol/protocolVersion',
        'io.modelcontextprotocol/clientCapabilities',
        'io.modelcontextprotocol/clientInfo',
        'io.modelcontextprotocol/logLevel',
        'progressToken',
      ]) {
        for (const value of odd) {
          const res = await postModern(
            `${url}/mcp`,
            { method: 'tools/call', params: { name: 'gateway_list_enabled', arguments: {} } },
            { meta: { [key]: value } },
          );
          expect(res.status, `${key}: ${JSON.stringify(value)}`).to.be.oneOf([200, 400]);
          await res.body?.cancel();
        }
      }
    });

    it('accepts notifications with 202, ignores Mcp-Session-Id, and keeps GET and DELETE 405', async () => {
      const note = await rpc(
        JSON.stringify({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1 } }),
        { 'mcp-protocol-version': MODERN_REVISION, 'mcp-method': 'notifications/cancelled' },
      );
      expect(note.status).to.equal(202);
      const { status, headers, body } = await modern('tools/list', undefined, {
        headers: { 'mcp-session-id': 'not-a-session-of-ours' },
      });
      expect(status).to.equal(200);
      expect(body.result).to.include({ resultType: 'complete' });
      expect(headers.get('mcp-session-id')).to.equal(null);
      for (const method of ['GET', 'DELETE']) {
        const res = await fetch(`${url}/mcp`, {
          method,
          headers: { 'mcp-protocol-version': MODERN_REVISION, accept: 'text/event-stream' },
        });
        expect(res.status, method).to.equal(405);
      }
    });
  });

  it('documents the REST surface in OpenAPI', async () => {
    const doc = (await (await fetch(`${url}/api/openapi.json`)).json()) as {
      openapi: string;
      paths: Record<string, unknown>;
    };
    expect(doc.openapi).to.equal('3.1.0');
    expect(doc.paths).to.include.keys(
      '/mcp',
      '/api/servers',
      '/api/servers/{id}/tools/{name}',
      '/api/warmup/status',
    );
  });
});
