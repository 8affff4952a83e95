import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import type { Serving } from '../../../services/serve.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import { mcpClient, ProbeWorld, textOf } from './support.ts';

describe('gateway: the first calls during the start-up warmup', function () {
  this.timeout(180_000);
  let world: ProbeWorld;
  let gateway: Serving & { url: string };

  before(async () => {
    // A fresh world: an empty package cache, so the warmup installs while the calls come in.
    world = await ProbeWorld.start();
  });
  after(async () => {
    await gateway?.stop();
    await world?.stop();
  });

  it('wait for the install and verification in progress, over MCP and REST', async () => {
    // Resolves once the gateway listens, with the warmup only started.
    gateway = await world.gateway(TEST_DATABASES[0], { warmupAtStart: true });
    const status = (await (await fetch(`${gateway.url}/api/warmup/status`)).json()) as {
      summary: { verified: number };
    };
    expect(status.summary.verified, 'nothing is verified yet').to.equal(0);
    const client = await mcpClient(`${gateway.url}/mcp/server/probe`);
    const [called, listed] = await Promise.all([
      client.callTool({ name: 'echo', arguments: { message: 'during warmup' } }) as Promise<CallToolResult>,
      fetch(`${gateway.url}/api/servers/probe/tools`),
    ]);
    await client.close();
    expect(called.isError, textOf(called)).to.not.equal(true);
    expect(textOf(called)).to.include('during warmup');
    const body = await listed.text();
    expect(listed.status, body).to.equal(200);
    expect((JSON.parse(body) as { tools: { name: string }[] }).tools.map((t) => t.name)).to.include('echo');
  });

  it('a stop during the warmup waits for the server in progress and skips the rest; nothing runs on a closed database', async () => {
    const early = await world.gateway(TEST_DATABASES[0], { warmupAtStart: true });
    await early.stop();
    // Before, the warmup went on after the kernel closed its database: knex aborted its queries.
    const outcome = await early.warmedUp;
    expect(outcome?.servers).to.be.a('number');
  });
});
