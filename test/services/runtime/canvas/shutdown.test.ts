import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts';
import { serve, type Serving } from '../../../../services/serve.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { parseSse, readSse, runtimeClient, signIn } from '../chat-support.ts';
import { approvalFlow, openCanvasKernel } from './support.ts';

/** Reads until the text read holds `until`, and resolves with it, leaving the stream open. */
async function readUntil(reader: ReadableStreamDefaultReader<Uint8Array>, until: string): Promise<string> {
  let text = '';
  const decoder = new TextDecoder();
  while (!text.includes(until)) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the stream ended before ${until}:\n${text}`);
    text += decoder.decode(value, { stream: true });
  }
  return text;
}

/**
 * Ctrl-C (`serve`'s stop) with a canvas run's event stream open: the run waits for its approval,
 * stored, so its stream need not hold the shutdown for the in-flight requests' grace (10 s). It gets
 * a `shutdown` event saying where to pick up, and ends cleanly, at once.
 */
describeEachDatabase('canvas: event streams at shutdown', (database) => {
  it('an open run stream gets a shutdown event with its last event id and ends, and the runtime stops at once', async function () {
    this.timeout(120_000);
    const dataDir = mkdtempSync(join(tmpdir(), 'sigil-canvas-data-'));
    const kernel = await openCanvasKernel(database, dataDir);
    let serving: Serving | undefined;
    try {
      serving = await serve(kernel, ['runtime']);
      const base = serving.urls.runtime as string;
      const wallet = privateKeyToAccount(generatePrivateKey());
      const client = runtimeClient(base, await signIn(base, wallet));
      const agentId = (await client.json('POST', '/agents', { name: 'a', model: 'sigil-echo' })).body.id;
      const started = await readSse(
        await client.send('POST', '/canvas/workflows/execute/stream', { agentId, workflow: approvalFlow }),
        (e) => e.event === 'run.status' && e.data.status === 'waiting_approval',
      );
      const runId = started[0]?.data.runId as string;

      // Another client follows the waiting run: caught up, its stream stays open with nothing to send.
      const res = await client.send('GET', `/canvas/runs/${runId}/events`);
      const reader = (res.body as ReadableStream<Uint8Array>).getReader();
      let text = await readUntil(reader, '"status":"waiting_approval"');
      const lastSeq = parseSse(text).at(-1)?.data.seq as number;

      const stopping = Date.now();
      const stopped = serving.stop().then(() => Date.now() - stopping);
      serving = undefined;
      // To its end: a bare EOF (the connection dropped) would reject here.
      const decoder = new TextDecoder();
      for (let part = await reader.read(); !part.done; part = await reader.read())
        text += decoder.decode(part.value, { stream: true });
      const [last, ...none] = parseSse(text.slice(text.lastIndexOf('event: shutdown')));
      expect(none).to.deep.equal([]);
      expect(last).to.deep.equal({
        event: 'shutdown',
        data: { runId, lastEventId: String(lastSeq), reason: 'runtime_stopping' },
      });
      // No id of its own: an EventSource reconnects with the last run event's.
      expect(text).to.match(/\n\nevent: shutdown\ndata: [^\n]*\n\n$/);
      expect(await stopped, 'stopped well within the 10 s grace').to.be.below(5_000);
    } finally {
      await serving?.stop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});
