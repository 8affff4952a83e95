import { expect } from 'chai';
import type { Serving } from '../../../services/serve.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import { hostileEntry, hostilePackage, ProbeWorld } from './support.ts';

describe('gateway: a server that exits before the MCP handshake', function () {
  this.timeout(120_000);
  let world: ProbeWorld;
  let gateway: Serving & { url: string };

  before(async () => {
    world = await ProbeWorld.start({
      packages: [hostilePackage],
      servers: [
        { ...hostileEntry, id: 'hostile-exits', entry: { bin: 'sigil-hostile', args: ['--exit-at-start'] } },
      ],
    });
    gateway = await world.gateway(TEST_DATABASES[0]);
  });
  after(async () => {
    await gateway?.stop();
    await world?.stop();
  });

  it('is unavailable with its exit and the end of its stderr, not the failed write to its stdin', async () => {
    const response = await fetch(`${gateway.url}/api/servers/hostile-exits/tools`);
    const body = await response.text();
    expect(response.status, body).to.equal(503);
    expect(body).to.include('did not start: the process exited (code 3) before the MCP handshake');
    expect(body).to.include('hostile: cannot start: the configuration file is missing');
    expect(body).not.to.include('write after end');
    const details = (await (await fetch(`${gateway.url}/api/servers/hostile-exits`)).json()) as {
      lastError: string | null;
    };
    expect(details.lastError).to.include('before the MCP handshake');
  });
});
