import { cpSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.ts';
import type { Serving } from '../../../services/serve.ts';
import { eventually } from '../../support/eventually.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import { mcpClient, probePackage, ProbeWorld, textOf } from './support.ts';

interface Details {
  version: string | null;
  digest: string | null;
  tier: string | null;
  filter: { status: string; reason: string | null };
  lastError: string | null;
}

/**
 * The gateway pins what it verified: calls run exactly that version and digest, the daily refresh
 * resolves every server anew, and a pinned version whose content the registry changed is refused.
 */
describe('gateway: pinned versions and the daily refresh', function () {
  this.timeout(180_000);
  let world: ProbeWorld;
  let gateway: Serving & { url: string };
  const clock = new ManualClock(new Date('2026-11-22T12:00:00Z'));
  const work = mkdtempSync(join(tmpdir(), 'sigil-pins-'));

  before(async () => {
    world = await ProbeWorld.start();
    gateway = await world.gateway(
      TEST_DATABASES[0],
      { warmupAtStart: false, refresh: { enabled: true, at: '03:00', pollSeconds: 1 } },
      { clock },
    );
  });
  after(async () => {
    await gateway?.stop();
    await world?.stop();
    rmSync(work, { recursive: true, force: true });
  });

  const details = async (): Promise<Details> =>
    (await (await fetch(`${gateway.url}/api/servers/probe`)).json()) as Details;
  const warmup = async () =>
    (await (await fetch(`${gateway.url}/api/warmup/status`)).json()) as {
      summary: { lastRun: string | null; nextRefresh: string | null };
    };

  it('says when the daily refresh runs, runs it then, and refuses a pinned version the registry changed', async () => {
    expect((await warmup()).summary.nextRefresh).to.equal('2026-11-23T03:00:00.000Z');
    const client = await mcpClient(`${gateway.url}/mcp/server/probe`);
    const first = await client.callTool({ name: 'echo', arguments: { message: 'pinned' } });
    await client.close();
    expect(textOf(first)).to.include('pinned');
    const pinned = await details();
    expect(pinned.version).to.equal('1.0.0');
    expect(pinned.tier).to.not.equal(null);

    // The registry now serves other content, with a digest that matches it, under the same version.
    const altered = join(work, 'altered');
    cpSync(probePackage, altered, { recursive: true });
    writeFileSync(join(altered, 'server.mjs'), '#!/usr/bin/env node\nprocess.exit(3);\n');
    const newDigest = await world.registry.replaceVersion({ dir: altered });
    expect(newDigest).to.not.equal(pinned.digest);

    clock.set(new Date('2026-11-23T03:00:01Z'));
    await eventually('the daily refresh', async () => (await warmup()).summary.lastRun !== null, 60_000);
    expect((await warmup()).summary.nextRefresh).to.equal('2026-11-24T03:00:00.000Z');

    const refused = await details();
    expect(refused.filter.status).to.equal('blocked');
    expect(refused.filter.reason).to.include('changed the pinned version');
    expect(refused.lastError).to.include('changed since it was pinned').and.include(newDigest);
    // The pin stays what was verified, so every later refresh refuses the change again.
    expect([refused.version, refused.digest]).to.deep.equal([pinned.version, pinned.digest]);

    const call = await fetch(`${gateway.url}/api/servers/probe/tools/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ arguments: { message: 'after' } }),
    });
    expect(call.status).to.equal(403);
    const body = (await call.json()) as { code: string; message: string };
    expect(body.code).to.equal('forbidden');
    expect(body.message).to.include('blocked by the security filter');
  });
});
