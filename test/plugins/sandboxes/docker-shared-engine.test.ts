import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { expect } from 'chai';
import type { ImageLaunch, SandboxSpecV2 } from '@sigil/plugin-api';
import type { DockerRuntime, DockerSandboxProcess } from '../../../plugins/sandboxes/docker/index.ts';
import { currentOwner, LABELS, type Owner } from '../../../plugins/sandboxes/docker/owner.ts';
import { IMAGE_PATHS, ociLayoutOf } from '../../support/docker.ts';
import { rejectionOf } from '../../support/rejection.ts';
import {
  callTool,
  childGateway,
  containerEvent,
  containerExists,
  DockerProbes,
  mcpClient,
} from './docker-support.ts';

/**
 * Two gateway replicas on different hosts, sharing one remote Docker engine over TCP with TLS (the
 * test engine's TLS port): this process is the gateway on this host; the other is a runtime whose
 * containers name another host as their owner's, with a pid that runs nowhere here (so judging it by
 * this host's process table would call it dead). Both run images (a remote engine runs no host
 * programs): the node test image, loaded from an OCI layout of it.
 */
describe('sandbox-docker: two gateways on one remote engine (TCP with TLS)', function () {
  this.timeout(120_000);
  const probes = new DockerProbes();
  /** Two uids only, out of the default range (other test files' containers on the engine hold those). */
  const uidRange = { first: 0x70030000, count: 2 };
  const otherHost: Owner = {
    instance: randomBytes(8).toString('hex'),
    host: 'gateway-b.sigil.test',
    pidNamespace: currentOwner().pidNamespace,
    // Above any pid_max: no process here has it.
    process: '4194305.1',
  };
  let layoutDir: string;
  let image: Pick<ImageLaunch, 'image' | 'layout'>;
  let tls: Record<string, unknown>;

  before(async () => {
    await probes.start();
    // A run killed midway leaves the stand-in host's containers, which no gateway reaps (its host is
    // never this one) and whose uids would fill the range: this file's own leftovers go first.
    const docker = probes.engine.docker;
    const left = await docker.listContainers({
      all: true,
      filters: { label: [`${LABELS.ownerHost}=${otherHost.host}`] },
    });
    await Promise.all(left.map((container) => docker.getContainer(container.Id).remove({ force: true })));
    const { host, port, ca, cert, key } = probes.engine.tls;
    tls = { engine: { host, port, ca, cert, key }, uidRange };
    layoutDir = mkdtempSync(join(tmpdir(), 'sigil-layout-'));
    const { layout, digest } = await ociLayoutOf(probes.engine.docker, probes.engine.images.node, layoutDir);
    image = { image: `sigil-test/layout@${digest}`, layout };
  });
  after(async () => {
    await probes.stop();
    rmSync(layoutDir, { recursive: true, force: true });
  });

  /** A gateway's runtime on the TLS engine: this host's (this process), or the other host's. */
  const gateway = (owner?: Owner) =>
    probes.runtime({ ...tls, stateDir: owner ? '/tmp/sigil-docker-b' : '/tmp/sigil-docker-a' }, owner);

  const everything = (): SandboxSpecV2 => ({
    launch: { kind: 'image', ...image, entrypoint: ['node'], args: [IMAGE_PATHS.everything, 'stdio'] },
    env: {},
    networkAllowList: [],
  });

  const labelsOf = async (sandbox: DockerSandboxProcess) =>
    (await probes.engine.docker.getContainer(sandbox.containerId).inspect()).Config.Labels;

  /** Starts the everything server on `runtime` and connects to it; the client's close kills it. */
  async function serve(runtime: DockerRuntime): Promise<{ sandbox: DockerSandboxProcess; client: Client }> {
    const sandbox = await runtime.spawn(everything());
    return { sandbox, client: await mcpClient(sandbox) };
  }

  it('runs both gateways’ servers and serves calls through each, under uids neither shares (the engine’s list says which are held)', async () => {
    const [here, there] = [await gateway(), await gateway(otherHost)];
    const [a, b] = [await serve(here), await serve(there)];
    try {
      expect(await callTool(a.client, 'echo', { message: 'from here' })).to.include('from here');
      expect(await callTool(b.client, 'echo', { message: 'from there' })).to.include('from there');
      const [labelsA, labelsB] = [await labelsOf(a.sandbox), await labelsOf(b.sandbox)];
      expect([labelsA[LABELS.ownerHost], labelsB[LABELS.ownerHost]]).to.deep.equal([
        hostname(),
        otherHost.host,
      ]);
      const uids = [Number(labelsA[LABELS.uid]), Number(labelsB[LABELS.uid])];
      expect(uids.sort()).to.deep.equal([uidRange.first, uidRange.first + 1]);
      // The range is full: whichever gateway asks next finds no free uid, though it holds one only.
      for (const runtime of [here, there]) {
        const full = await rejectionOf(runtime.spawn(everything()));
        expect(full.code).to.equal('unavailable');
        expect(full.details?.reason).to.equal('uids_exhausted');
      }
      // The other host's server ends: its uid is free for this host's next one.
      const uidB = Number(labelsB[LABELS.uid]);
      await b.client.close();
      expect(await containerExists(probes.engine.docker, b.sandbox.containerId)).to.equal(false);
      const next = await serve(here);
      try {
        expect(Number((await labelsOf(next.sandbox))[LABELS.uid])).to.equal(uidB);
      } finally {
        await next.client.close();
      }
    } finally {
      await Promise.all([a.client.close(), b.client.close()]);
    }
  });

  it('gives two gateways asking at once two uids or one refusal, never one uid twice (the engine’s unique names claim it)', async () => {
    const [here, there] = [await gateway(), await gateway(otherHost)];
    // Warm both (image found, /bin/sh looked up), so that the next two spawns race from the list of uids.
    for (const runtime of [here, there]) await (await runtime.spawn(everything())).kill();
    for (let round = 0; round < 5; round++) {
      const spawned = await Promise.allSettled([
        here.spawn(everything()),
        there.spawn(everything()),
        here.spawn(everything()),
      ]);
      const live = spawned.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
      try {
        const uids = await Promise.all(
          live.map(async (sandbox) => Number((await labelsOf(sandbox))[LABELS.uid])),
        );
        expect(new Set(uids).size, `round ${round}: uids ${uids.join(', ')}`).to.equal(uids.length);
        expect(live).to.have.length(2);
        for (const result of spawned) {
          if (result.status === 'rejected') {
            expect((result.reason as { details?: { reason?: string } }).details?.reason).to.equal(
              'uids_exhausted',
            );
          }
        }
      } finally {
        await Promise.all(live.map((sandbox) => sandbox.kill()));
      }
    }
  });

  it('starting up, a gateway removes no live container of another gateway, of its own host or another', async () => {
    const [here, there] = [await gateway(), await gateway(otherHost)];
    const [a, b] = [await serve(here), await serve(there)];
    try {
      // A replica of this host starting (start() reaps), then reaping again.
      const restarted = await gateway();
      expect(await restarted.reapLeftovers()).to.equal(0);
      for (const { sandbox } of [a, b]) {
        expect(await containerExists(probes.engine.docker, sandbox.containerId)).to.equal(true);
      }
      expect(await callTool(a.client, 'echo', { message: 'still here' })).to.include('still here');
      expect(await callTool(b.client, 'echo', { message: 'still there' })).to.include('still there');
    } finally {
      await Promise.all([a.client.close(), b.client.close()]);
    }
  });

  /** A gateway of this host in a child process, on the TLS engine, with a sleeping probe of the node image. */
  const gatewayChild = () =>
    childGateway(
      { ...tls, images: probes.engine.images, stateDir: '/tmp/sigil-docker-a' },
      { kind: 'image', ...image, entrypoint: ['node'], args: [IMAGE_PATHS.probe, 'sleep'] },
    );

  it('a gateway killed with SIGKILL leaves nothing on the remote engine: its watchdog removes its containers over TLS', async () => {
    const { child, container } = await gatewayChild();
    try {
      expect(await containerExists(probes.engine.docker, container)).to.equal(true);
      expect(
        await containerEvent(probes.engine.docker, container, 'destroy', () => child.kill('SIGKILL')),
      ).to.equal(true);
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('a gateway killed with its watchdog: the other host’s gateway cannot know it is dead and leaves its container; the next start on its host removes it', async () => {
    const there = await gateway(otherHost);
    const { child, container, watchdog } = await gatewayChild();
    try {
      process.kill(watchdog, 'SIGKILL');
      child.kill('SIGKILL');
      await new Promise((resolve) => child.once('exit', resolve));
      expect(await there.reapLeftovers()).to.equal(0);
      expect(await containerExists(probes.engine.docker, container)).to.equal(true);
      const restarted = await gateway();
      expect(await containerExists(probes.engine.docker, container)).to.equal(false);
      expect(await restarted.reapLeftovers()).to.equal(0);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
