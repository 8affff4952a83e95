import { expect } from 'chai';
import type { Serving } from '../../../services/serve.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import { mcpClient, ProbeWorld, textOf, walletToken } from './support.ts';

/**
 * The gateway end to end: a real MCP server package published to a real npm registry (verdaccio),
 * installed by the npm registry plugin, run in the linux-namespaces sandbox, reached by the official
 * SDK client over Streamable HTTP.
 */
describe('gateway end to end (verdaccio → registry-npm → sandbox → MCP)', function () {
  this.timeout(120_000);
  let world: ProbeWorld;
  before(async () => {
    world = await ProbeWorld.start();
  });
  after(() => world.stop());

  for (const database of TEST_DATABASES) {
    describe(`on ${database.name}`, () => {
      let serving: Serving & { url: string };
      let url: string;
      let token: string;

      before(async () => {
        serving = await world.gateway(database, { idleTimeoutSeconds: 2, toolCallTimeoutSeconds: 3 });
        url = serving.url;
        token = (await walletToken(url)).token;
      });
      after(() => serving?.stop());

      it('lists meta-tools only, enables a server, lists and calls its tools; a second call reuses the process', async () => {
        const client = await mcpClient(`${url}/mcp`, token, 'e2e');
        expect((await client.listTools()).tools.every((t) => t.name.startsWith('gateway_'))).to.equal(true);
        const enabled = await client.callTool({
          name: 'gateway_enable_server',
          arguments: { serverId: 'probe' },
        });
        expect(enabled.isError, textOf(enabled)).to.not.equal(true);
        const names = (await client.listTools()).tools.map((t) => t.name);
        expect(names).to.include.members(['probe__echo', 'probe__instance', 'probe__sleep']);
        expect(
          textOf(await client.callTool({ name: 'probe__echo', arguments: { message: 'hello sandbox' } })),
        ).to.equal('hello sandbox');
        const first = textOf(await client.callTool({ name: 'probe__instance', arguments: {} }));
        const second = textOf(await client.callTool({ name: 'probe__instance', arguments: {} }));
        expect(second).to.equal(first);
        await client.close();
      });

      it('records the verification tier and the digest from the registry', async () => {
        const details = (await (await fetch(`${url}/api/servers/probe`)).json()) as {
          tier: string;
          digest: string;
          version: string;
          filter: { status: string };
        };
        expect(details).to.include({ tier: 'tool_smoke_passed', version: '1.0.0' });
        expect(details.filter.status).to.equal('allowed');
        expect(details.digest).to.equal(
          world.registry.published.find((p) => p.name === '@sigil-test/probe-server')?.integrity,
        );
        const status = (await (await fetch(`${url}/api/warmup/status`)).json()) as {
          summary: { verified: number; packages: number };
        };
        expect(status.summary.verified).to.equal(1);
        expect(status.summary.packages).to.be.greaterThan(0);
      });

      it('keeps the enabled set per wallet session, across a new client', async () => {
        const again = await mcpClient(`${url}/mcp`, token, 'e2e');
        expect((await again.listTools()).tools.map((t) => t.name)).to.include('probe__echo');
        await again.close();
        const otherSession = await mcpClient(`${url}/mcp`, token, 'another');
        expect((await otherSession.listTools()).tools.map((t) => t.name)).not.to.include('probe__echo');
        await otherSession.close();
        const otherWallet = await mcpClient(`${url}/mcp`, (await walletToken(url)).token, 'e2e');
        expect((await otherWallet.listTools()).tools.map((t) => t.name)).not.to.include('probe__echo');
        await otherWallet.close();
      });

      it('serves the same path over REST and the per-server endpoint', async () => {
        const rest = await fetch(`${url}/api/servers/probe/tools/echo`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ arguments: { message: 'over rest' } }),
        });
        expect(rest.status).to.equal(200);
        expect(textOf(await rest.json())).to.equal('over rest');
        const perServer = await mcpClient(`${url}/mcp/server/probe`);
        expect((await perServer.listTools()).tools.map((t) => t.name)).to.include('echo');
        expect(textOf(await perServer.callTool({ name: 'echo', arguments: { message: 'direct' } }))).to.equal(
          'direct',
        );
        await perServer.close();
      });

      it('refuses arguments over 100 KB before any work', async () => {
        const res = await fetch(`${url}/mcp/server/probe`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            jsonrpc: '2.0',
            id: 1,
            method: 'tools/call',
            params: { name: 'echo', arguments: { message: 'x'.repeat(101 * 1024) } },
          }),
        });
        const body = (await res.json()) as { error?: { code: number; message: string } };
        expect(body.error?.code).to.equal(-32602);
        expect(body.error?.message).to.match(/limit is 102400/);
      });

      it('turns a server error and a timeout into tool errors, and replaces a timed-out server', async () => {
        const client = await mcpClient(`${url}/mcp/server/probe`);
        const failed = await client.callTool({ name: 'fail', arguments: {} });
        expect(failed.isError).to.equal(true);
        expect(textOf(failed)).to.match(/failed on purpose/);
        const before = textOf(await client.callTool({ name: 'instance', arguments: {} }));
        const slow = await client.callTool({ name: 'sleep', arguments: { ms: 10_000 } });
        expect(slow.isError).to.equal(true);
        expect(textOf(slow)).to.match(/timed out after 3000 ms/);
        expect(JSON.stringify(slow)).not.to.match(/at .*\.ts:\d+/);
        const after = textOf(await client.callTool({ name: 'instance', arguments: {} }));
        expect(after).not.to.equal(before);
        await client.close();
      });

      it('cancels the call of a client that went away, and keeps the process warm', async () => {
        const client = await mcpClient(`${url}/mcp/server/probe`);
        const before = textOf(await client.callTool({ name: 'instance', arguments: {} }));
        const leaving = new AbortController();
        const abandoned = fetch(`${url}/mcp/server/probe`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
          body: JSON.stringify({
            jsonrpc: '2.0',
            id: 1,
            method: 'tools/call',
            params: { name: 'sleep', arguments: { ms: 1500 } },
          }),
          signal: leaving.signal,
        });
        await new Promise((resolve) => setTimeout(resolve, 200));
        leaving.abort();
        expect(await abandoned.catch((err: Error) => err.name)).to.equal('AbortError');
        // Cancelled, not timed out: the process was not replaced.
        expect(textOf(await client.callTool({ name: 'instance', arguments: {} }))).to.equal(before);
        await client.close();
      });

      it('restarts a crashed server on the next call, and stops an idle one', async () => {
        const client = await mcpClient(`${url}/mcp/server/probe`);
        const before = textOf(await client.callTool({ name: 'instance', arguments: {} }));
        expect((await client.callTool({ name: 'crash', arguments: {} })).isError).to.equal(true);
        const restarted = textOf(await client.callTool({ name: 'instance', arguments: {} }));
        expect(restarted).not.to.equal(before);
        await new Promise((resolve) => setTimeout(resolve, 3_500));
        const afterIdle = textOf(await client.callTool({ name: 'instance', arguments: {} }));
        expect(afterIdle).not.to.equal(restarted);
        await client.close();
      });
    });
  }
});
