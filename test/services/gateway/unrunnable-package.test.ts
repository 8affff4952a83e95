import { rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import type { Serving } from '../../../services/serve.ts';
import { describeEachDatabase, stickyDatabase } from '../../support/kernel.ts';
import { mcpClient, probeEntry, ProbeWorld, textOf } from './support.ts';

/**
 * A verified server whose package can no longer be had: its installed files removed (the sandbox
 * cannot mount them), then, on a gateway started afresh, the package gone from the registry too (it
 * cannot be installed again). Each call is refused with a stable code: over MCP a tool error the model
 * reads (no "Internal error", no "Unknown tool"), over REST the code's status and reason.
 */
describeEachDatabase(
  'gateway: a tool call on a server whose package cannot be mounted or installed',
  (database) => {
    // One database for both gateways: the second finds the server verified by the first.
    const sticky = stickyDatabase(database);
    let world: ProbeWorld;
    let gateway: (Serving & { url: string }) | undefined;
    let client: Client | undefined;

    before(async function () {
      this.timeout(120_000);
      world = await ProbeWorld.start();
    });
    afterEach(async () => {
      await client?.close();
      await gateway?.stop();
    });
    after(async () => {
      await world?.stop();
      await sticky.drop();
    });

    const open = async () => {
      gateway = await world.gateway(sticky.database, { warmupAtStart: false });
      // Connecting admits the server: installed and verified once, its verdict kept in the database.
      client = await mcpClient(`${gateway.url}/mcp/server/probe`);
      return gateway.url;
    };
    const callOverMcp = async () =>
      (await (client as Client).callTool({ name: 'echo', arguments: { message: 'hi' } })) as CallToolResult;
    const callOverRest = async (url: string) => {
      const response = await fetch(`${url}/api/servers/probe/tools/echo`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ arguments: { message: 'hi' } }),
      });
      return { status: response.status, body: (await response.json()) as Record<string, unknown> };
    };

    it('whose installed files are gone: unavailable (path_missing), not a server that "broke the protocol"', async function () {
      this.timeout(120_000);
      const url = await open();
      rmSync(join(world.dir, 'packages'), { recursive: true, force: true });

      const result = await callOverMcp();
      expect(result.isError, textOf(result)).to.equal(true);
      expect(textOf(result)).to.match(/does not exist on the host/);
      const rest = await callOverRest(url);
      expect(rest.status, JSON.stringify(rest.body)).to.equal(503);
      expect(rest.body).to.include({ code: 'unavailable' });
      expect(rest.body.details).to.include({ reason: 'path_missing' });
    });

    it('that the registry no longer has: a tool error naming the package (not "Unknown tool" -32602), REST 404 not_found', async function () {
      this.timeout(120_000);
      rmSync(join(world.registry.storage, probeEntry.package), { recursive: true, force: true });
      const url = await open();

      const result = await callOverMcp();
      expect(result.isError, textOf(result)).to.equal(true);
      expect(textOf(result))
        .to.include(probeEntry.package)
        .and.not.match(/Unknown tool|Internal error/);
      const rest = await callOverRest(url);
      expect(rest.status, JSON.stringify(rest.body)).to.equal(404);
      expect(rest.body).to.include({ code: 'not_found' });
      expect(rest.body.details).to.include({ reason: 'not_found' });
    });
  },
);
