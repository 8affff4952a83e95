import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.ts';
import { RETRY_FAILED_VERIFICATION_MS } from '../../../services/gateway/servers.ts';
import type { Serving } from '../../../services/serve.ts';
import { TEST_DATABASES } from '../../support/kernel.ts';
import { ProbeWorld, probeEntry, probePackage } from './support.ts';

/**
 * A verification that failed for a cause that passes (here a version the registry did not have yet)
 * is tried again on demand once RETRY_FAILED_VERIFICATION_MS old, not before; the operator need not
 * restart the gateway or ask for a refresh.
 */
describe('gateway: a failed verification is tried again on demand', function () {
  this.timeout(120_000);
  const clock = new ManualClock(new Date('2026-11-26T10:00:00Z'));
  let world: ProbeWorld;
  let gateway: Serving & { url: string };

  before(async () => {
    world = await ProbeWorld.start({ servers: [{ ...probeEntry, id: 'probe-next', version: '2.0.0' }] });
    gateway = await world.gateway(TEST_DATABASES[0], { warmupAtStart: false }, { clock });
  });
  after(async () => {
    await gateway?.stop();
    await world?.stop();
  });

  const call = () =>
    fetch(`${gateway.url}/api/servers/probe-next/tools/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ arguments: { message: 'again' } }),
    });
  const verifiedAt = async () =>
    ((await (await fetch(`${gateway.url}/api/servers/probe-next`)).json()) as { verifiedAt: string })
      .verifiedAt;

  it('answers the recorded failure until it is old enough, then verifies again and runs', async () => {
    const first = await call();
    expect(first.status).to.equal(503);
    expect(((await first.json()) as { message: string }).message).to.match(/failed verification/);
    const failedAt = await verifiedAt();

    // The registry gets the version; a call within the retry interval still answers the failure.
    const dir = mkdtempSync(join(world.dir, 'next-'));
    try {
      cpSync(probePackage, dir, { recursive: true });
      const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version: string };
      writeFileSync(join(dir, 'package.json'), JSON.stringify({ ...manifest, version: '2.0.0' }));
      await world.registry.publish({ dir });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    clock.advance(RETRY_FAILED_VERIFICATION_MS - 1000);
    expect((await call()).status).to.equal(503);
    expect(await verifiedAt(), 'no verification within the interval').to.equal(failedAt);

    clock.advance(1000);
    const retried = await call();
    expect(retried.status, await retried.clone().text()).to.equal(200);
    expect(await verifiedAt()).to.not.equal(failedAt);
  });
});
