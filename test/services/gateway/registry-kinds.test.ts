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
const mirror = (options: Record<string, unknown> = {}) => ({
  plugins: [{ resolve: join(hostFixtures, 'registry-mirror.ts'), enabled: true, options }],
});

describe('gateway: a catalog entry of the second registry kind a plugin provides', function () {
  this.timeout(120_000);
  let world: ProbeWorld;
  let gateway: Serving & { url: string };

  before(async () => {
    world = await ProbeWorld.start({ servers: [{ ...probeEntry, id: 'probe-git', registry: 'git' }] });
    gateway = await world.gateway(TEST_DATABASES[0], {}, mirror());
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

describe('gateway: a registry plugin that fails with a plain Error', function () {
  this.timeout(120_000);
  let world: ProbeWorld;
  let gateway: Serving & { url: string };

  before(async () => {
    world = await ProbeWorld.start({ servers: [{ ...probeEntry, id: 'probe-git', registry: 'git' }] });
    gateway = await world.gateway(TEST_DATABASES[0], { warmupAtStart: false }, mirror({ failInstall: true }));
  });
  after(async () => {
    await gateway?.stop();
    await world?.stop();
  });

  it('is refused as unavailable naming the step, and the error’s own text reaches no caller', async () => {
    const response = await fetch(`${gateway.url}/api/servers/probe-git/tools/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ arguments: { message: 'hi' } }),
    });
    const text = await response.text();
    expect(response.status, text).to.equal(503);
    const body = JSON.parse(text) as { code: string; message: string };
    expect(body.code, text).to.equal('unavailable');
    // It fails verification, the step named (with the plugin's own text left out).
    expect(body.message).to.match(/Installing @sigil-test\/probe-server@\S+ from git failed$/);
    expect(text).to.not.include('canary-mirror');
    const details = await (await fetch(`${gateway.url}/api/servers/probe-git`)).text();
    expect(details).to.include('from git failed').and.not.include('canary-mirror');
  });
});
