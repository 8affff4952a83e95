import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { expect } from 'chai';
import type { Kernel } from '../../../services/kernel.ts';
import { serve, type Serving } from '../../../services/serve.ts';
import { META_TOOLS } from '../../../services/gateway/mcp/gateway-tools.ts';
import { openTestKernel } from '../../support/kernel.ts';
import { postMcp } from './support.ts';

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

  it('refuses an unsupported MCP-Protocol-Version header', async () => {
    const res = await rpc(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }), {
      'mcp-protocol-version': '1999-01-01',
    });
    expect(res.status).to.equal(400);
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
