import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { serve, type Serving } from '../../../../services/serve.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { readSse, runtimeClient, signIn } from '../chat-support.ts';
import { approvalFlow, openCanvasKernel } from './support.ts';

/**
 * A run's event stream runs on after its HTTP handler returned, so nothing above it would catch its
 * failure: a store that cannot be read must end the stream, not the runtime with an unhandled rejection.
 */
describeEachDatabase('canvas: an event stream whose store read fails', (database) => {
  it('ends the stream, and the runtime goes on (no unhandled rejection)', async function () {
    this.timeout(120_000);
    const dataDir = mkdtempSync(join(tmpdir(), 'sigil-canvas-data-'));
    const kernel = await openCanvasKernel(database, dataDir);
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => unhandled.push(reason);
    // Mocha's own listener turns an unhandled rejection into a failure of whichever test then runs;
    // this test's listener alone, so the rejection is counted here, where it happens.
    const mochas = process.listeners('unhandledRejection');
    process.removeAllListeners('unhandledRejection');
    process.on('unhandledRejection', onUnhandled);
    let serving: Serving | undefined;
    try {
      serving = await serve(kernel, ['runtime']);
      const base = serving.urls.runtime as string;
      const client = runtimeClient(base, await signIn(base, privateKeyToAccount(generatePrivateKey())));
      const agentId = (await client.json('POST', '/agents', { name: 'a', model: 'sigil-echo' })).body.id;
      const started = await readSse(
        await client.send('POST', '/canvas/workflows/execute/stream', { agentId, workflow: approvalFlow }),
        (e) => e.event === 'run.status' && e.data.status === 'waiting_approval',
      );
      const runId = started[0]?.data.runId as string;

      // The run is still readable; its events are not.
      await kernel.db.schema.renameTable('canvas_events', 'canvas_events_away');
      const res = await client.send('GET', `/canvas/runs/${runId}/events`);
      expect(res.status).to.equal(200);
      expect(await readSse(res)).to.deep.equal([]);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(unhandled).to.deep.equal([]);
      await kernel.db.schema.renameTable('canvas_events_away', 'canvas_events');
      expect((await client.json('GET', `/canvas/runs/${runId}`)).body.status).to.equal('waiting_approval');
    } finally {
      process.off('unhandledRejection', onUnhandled);
      for (const listener of mochas) process.on('unhandledRejection', listener);
      await serving?.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
