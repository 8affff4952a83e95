import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { expect } from 'chai';
import type { Serving } from '../../../services/serve.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import { fixturePath } from '../../support/paths.ts';
import { mcpClient, ProbeWorld, probeEntry, textOf } from './support.ts';

const hostFixtures = fixturePath('host');
// Imported by file URL, as the host imports the fixture plugin, so both see one module instance.
const { lifecycleEvents } = (await import(pathToFileURL(join(hostFixtures, 'recorder.ts')).href)) as {
  lifecycleEvents: string[];
};

describe('gateway: a catalog entry of the second registry kind a plugin provides', function () {
  this.timeout(120_000);
  let world: ProbeWorld;
  let gateway: Serving & { url: string };

  before(async () => {
    world = await ProbeWorld.start({ servers: [{ ...probeEntry, id: 'probe-git', registry: 'git' }] });
    gateway = await world.gateway(
      TEST_DATABASES[0],
      {},
      { plugins: [{ resolve: join(hostFixtures, 'registry-mirror.ts'), enabled: true, options: {} }] },
    );
  });
  after(async () => {
    await gateway?.stop();
    await world?.stop();
  });

  it('is installed by that plugin (extensionPoints.registryKinds, not its registryKind), and runs', async () => {
    lifecycleEvents.length = 0;
    const client = await mcpClient(`${gateway.url}/mcp/server/probe-git`);
    const called = (await client.callTool({
      name: 'echo',
      arguments: { message: 'from git' },
    })) as CallToolResult;
    await client.close();
    expect(called.isError, textOf(called)).to.not.equal(true);
    expect(textOf(called)).to.include('from git');
    expect(lifecycleEvents).to.deep.equal(['install:mirror:@sigil-test/probe-server@1.0.0']);
    const status = (await (await fetch(`${gateway.url}/api/warmup/status`)).json()) as {
      caches: { registry: string }[];
    };
    expect(status.caches.map((cache) => cache.registry)).to.deep.equal(['npm', 'oci, git']);
  });
});
