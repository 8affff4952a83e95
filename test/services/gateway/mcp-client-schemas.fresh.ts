import { Session } from 'node:inspector/promises';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import { mcpClientSchemasAsked, warmMcpClientSchemas } from '../../../core/mcp/warm-schemas.ts';
import type { Serving } from '../../../services/serve.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import { mcpClient, ProbeWorld, textOf } from './support.ts';

interface Coverage {
  result: { url: string; functions: { functionName: string; ranges: { count: number }[] }[] }[];
}

/** Calls since the last take of each function of the gateway's MCP SDK client (v2) bundle, by name. */
async function clientCalls(session: Session): Promise<Map<string, number>> {
  const { result } = (await session.post('Profiler.takePreciseCoverage')) as Coverage;
  const counts = new Map<string, number>();
  for (const script of result.filter((s) => /@modelcontextprotocol\/client\/dist\/[^/]*\.mjs$/.test(s.url)))
    for (const fn of script.functions)
      counts.set(fn.functionName, (counts.get(fn.functionName) ?? 0) + (fn.ranges[0]?.count ?? 0));
  return counts;
}

/**
 * Issue 30 (start-up): the MCP SDK client's wire schemas (20–30 ms of CPU, built by its first
 * validation) are built in the background once the gateway listens, not on the first tools/call's way.
 */
// Run by mcp-client-schemas.test.ts in a mocha process of its own (the schemas are built once a process).
describe('gateway: the MCP client schemas built after listening', function () {
  this.timeout(180_000);
  let world: ProbeWorld;
  let gateway: (Serving & { url: string }) | undefined;
  const session = new Session();

  before(async () => {
    world = await ProbeWorld.start();
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.startPreciseCoverage', { callCount: true, detailed: false });
  });
  after(async () => {
    await gateway?.stop();
    await world?.stop();
    await session.post('Profiler.stopPreciseCoverage');
    session.disconnect();
  });

  it('are asked for after the listening line, and the first tools/call builds none', async () => {
    let asked = false;
    void mcpClientSchemasAsked.then(() => (asked = true));
    gateway = await world.gateway(TEST_DATABASES[0]);
    expect(asked, 'not before serve() has resolved (the listening line)').to.equal(false);
    await mcpClientSchemasAsked;
    await warmMcpClientSchemas(); // the same memoized warm-up: settles once it has built them
    await clientCalls(session); // counts reset: what follows is the first call's path alone

    const client = await mcpClient(`${gateway.url}/mcp/server/probe`);
    const called = (await client.callTool({
      name: 'echo',
      arguments: { message: 'first' },
    })) as CallToolResult;
    await client.close();
    expect(called.isError, textOf(called)).to.not.equal(true);
    expect(textOf(called)).to.include('first');

    const calls = await clientCalls(session);
    // The coverage sees the gateway's client at work on this call (its handshake with the server)…
    expect(calls.get('connect') ?? 0, 'the client connected during the call').to.be.greaterThan(0);
    // …and neither era's schema factory ran on its way (each runs once per process, when first asked).
    expect(calls.get('build$1') ?? 0, 'the 2025-era schemas built on the call').to.equal(0);
    expect(calls.get('build') ?? 0, 'the 2026-era schemas built on the call').to.equal(0);
  });
});
