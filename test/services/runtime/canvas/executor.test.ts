import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { encodingsOf, REDACTED } from '@sigil/plugin-api';
import { readSse, storeAndUnlock, type SseEvent } from '../chat-support.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { witness } from '../../../fixtures/canvas/witness.ts';
import {
  canvasUser,
  type CanvasUser,
  type CanvasWorld,
  eventsUntil,
  execute,
  runIdOf,
  startCanvasWorld,
  workflow,
} from './support.ts';

const states = (events: SseEvent[], nodeId: string) =>
  events.filter((e) => e.event === 'node.status' && e.data.nodeId === nodeId).map((e) => e.data.state);

describeEachDatabase('canvas executor', (database) => {
  let world: CanvasWorld;
  let user: CanvasUser;

  before(async () => {
    world = await startCanvasWorld({ database, canvas: { maxParallelNodes: 2 } });
    user = await canvasUser(world.stack);
  });
  after(async () => {
    await world.close();
    world.removeData();
  });

  it('runs a chain in topological order and streams every node’s status, logs and outputs', async () => {
    const res = await execute(user, {
      workflow: workflow(
        [
          { id: 'c', kind: 'join' },
          { id: 'a', kind: 'emit', params: { value: 'first' } },
          { id: 'b', kind: 'emit', params: { value: 'second' } },
        ],
        ['a.value -> b.after', 'a.value -> c.a', 'b.value -> c.b'],
      ),
    });
    expect(res.status).to.equal(200);
    expect(res.headers.get('content-type')).to.match(/^text\/event-stream/);
    const events = await eventsUntil(res);
    expect(events[0]?.event).to.equal('run.started');
    const started = events
      .filter((e) => e.event === 'node.status' && e.data.state === 'running')
      .map((e) => e.data.nodeId);
    expect(started).to.deep.equal(['a', 'b', 'c']);
    expect(states(events, 'c')).to.deep.equal(['running', 'succeeded']);
    const output = events.find((e) => e.event === 'node.output' && e.data.nodeId === 'c');
    expect(output?.data.outputs).to.deep.equal({ value: ['first', 'second'] });
    expect(events.some((e) => e.event === 'node.log' && e.data.message === 'emitting')).to.equal(true);
    const ended = events.at(-1) as SseEvent;
    expect(ended.event).to.equal('run.ended');
    expect(ended.data.status).to.equal('succeeded');
    const seqs = events.map((e) => e.data.seq as number);
    expect(seqs).to.deep.equal(seqs.map((_, i) => i + 1));
    const run = await user.client.json('GET', `/canvas/runs/${runIdOf(events)}`);
    expect(run.body.status).to.equal('succeeded');
    expect(run.body.nodes.map((n: { state: string }) => n.state)).to.deep.equal([
      'succeeded',
      'succeeded',
      'succeeded',
    ]);
  });

  it('runs independent branches in parallel, never more than maxParallelNodes at once', async () => {
    const res = await execute(user, {
      workflow: workflow([
        { id: 'h1', kind: 'hang', timeoutSeconds: 60 },
        { id: 'h2', kind: 'hang', timeoutSeconds: 60 },
        { id: 'h3', kind: 'hang', timeoutSeconds: 60 },
      ]),
    });
    const running: string[] = [];
    const events = await readSse(res, (e) => {
      if (e.event === 'node.log') running.push(e.data.nodeId as string);
      return running.length === 2;
    });
    const runId = runIdOf(events);
    const detail = await user.client.json('GET', `/canvas/runs/${runId}`);
    const byState = (state: string) =>
      detail.body.nodes.filter((n: { state: string }) => n.state === state).length;
    expect(byState('running')).to.equal(2);
    expect(byState('queued')).to.equal(1);
    const cancelled = await user.client.json('POST', `/canvas/runs/${runId}/cancel`);
    expect(cancelled.status).to.equal(202);
    const rest = await eventsUntil(await user.client.send('GET', `/canvas/runs/${runId}/events`));
    expect(rest.at(-1)?.data.status).to.equal('cancelled');
    const after = await user.client.json('GET', `/canvas/runs/${runId}`);
    expect(after.body.nodes.map((n: { state: string }) => n.state).sort()).to.deep.equal([
      'cancelled',
      'cancelled',
      'cancelled',
    ]);
  });

  it('fails a node that outlives its timeoutSeconds with node_timeout, and the run with it', async () => {
    const events = await eventsUntil(
      await execute(user, { workflow: workflow([{ id: 'slow', kind: 'hang', timeoutSeconds: 1 }]) }),
    );
    const failure = events.find((e) => e.event === 'node.status' && e.data.state === 'failed');
    expect((failure?.data.error as { reason: string }).reason).to.equal('node_timeout');
    expect(events.at(-1)?.data.status).to.equal('failed');
  });

  it('retries a failing node by its retries, then fails fast: downstream skipped, the run failed', async () => {
    const retried = await eventsUntil(
      await execute(user, {
        workflow: workflow([{ id: 'f', kind: 'flaky', params: { failTimes: 2 }, retries: 2 }]),
      }),
    );
    expect(retried.filter((e) => e.event === 'node.retry').length).to.equal(2);
    expect(retried.find((e) => e.event === 'node.output')?.data.outputs).to.deep.equal({ attempt: 3 });
    expect(retried.at(-1)?.data.status).to.equal('succeeded');

    const failed = await eventsUntil(
      await execute(user, {
        workflow: workflow(
          [
            { id: 'f', kind: 'flaky', params: { failTimes: 5 }, retries: 1 },
            { id: 'after', kind: 'emit' },
          ],
          ['f.attempt -> after.after'],
        ),
      }),
    );
    const failure = failed.find((e) => e.event === 'node.status' && e.data.state === 'failed');
    expect(failure?.data).to.deep.include({ nodeId: 'f', attempt: 2 });
    expect((failure?.data.error as { reason: string }).reason).to.equal('flaky');
    expect(states(failed, 'after')).to.deep.equal(['skipped']);
    expect(failed.at(-1)?.data).to.deep.include({ status: 'failed' });
  });

  it('waits for an approval, resumes on the owner’s decision from another request, and a rejection fails downstream', async () => {
    const document = workflow(
      [
        { id: 'draft', kind: 'emit', params: { value: { title: 'Hello' } } },
        { id: 'approve', kind: 'gate' },
        { id: 'write', kind: 'record' },
      ],
      ['draft.value -> approve.value', 'approve.value -> write.value'],
    );
    const first = await readSse(
      await execute(user, { workflow: document }),
      (e) => e.event === 'run.status' && e.data.status === 'waiting_approval',
    );
    const request = first.find((e) => e.event === 'approval.required') as SseEvent;
    expect(request.data).to.deep.include({ nodeId: 'approve', value: { title: 'Hello' } });
    expect(request.data.valueHash).to.match(/^[0-9a-f]{64}$/);
    const runId = runIdOf(first);
    const detail = await user.client.json('GET', `/canvas/runs/${runId}`);
    expect(detail.body.status).to.equal('waiting_approval');

    const decided = await user.client.json('POST', `/canvas/runs/${runId}/nodes/approve/decision`, {
      approved: true,
      valueHash: request.data.valueHash,
    });
    expect(decided.status).to.equal(200);
    const rest = await eventsUntil(await user.client.send('GET', `/canvas/runs/${runId}/events`, undefined));
    expect(rest.at(-1)?.data.status).to.equal('succeeded');
    expect(
      rest.find((e) => e.event === 'node.output' && e.data.nodeId === 'write')?.data.outputs,
    ).to.deep.equal({
      path: 'write.json',
    });

    const second = await readSse(
      await execute(user, { workflow: document }),
      (e) => e.event === 'approval.required',
    );
    const rejectedRun = runIdOf(second);
    await user.client.json('POST', `/canvas/runs/${rejectedRun}/nodes/approve/decision`, { approved: false });
    const ended = await eventsUntil(await user.client.send('GET', `/canvas/runs/${rejectedRun}/events`));
    expect(states(ended, 'write')).to.deep.equal(['skipped']);
    expect(ended.at(-1)?.data.status).to.equal('failed');
  });

  it('lets a writes node act only once the store holds it running and its upstream nodes succeeded, though none nodes write behind', async () => {
    const seen: { nodes: Record<string, string>; events: string[] }[] = [];
    witness(async (runId) => {
      const { runs } = world.stack.runtime.canvas;
      const nodes = Object.fromEntries((await runs.nodes(runId)).map((node) => [node.nodeId, node.state]));
      const events = (await runs.events(runId, 0)).map((e) => {
        const data = JSON.parse(e.json) as { nodeId?: string; state?: string };
        return `${e.type} ${data.nodeId ?? ''} ${data.state ?? ''}`;
      });
      seen.push({ nodes, events });
    });
    try {
      const first = await readSse(
        await execute(user, {
          workflow: workflow(
            [
              { id: 'a', kind: 'emit' },
              { id: 'b', kind: 'emit' },
              { id: 'approve', kind: 'gate' },
              { id: 'w', kind: 'witness' },
            ],
            ['a.value -> b.after', 'b.value -> approve.value', 'approve.value -> w.after'],
          ),
        }),
        (e) => e.event === 'approval.required',
      );
      const runId = runIdOf(first);
      const decided = await user.client.json('POST', `/canvas/runs/${runId}/nodes/approve/decision`, {
        approved: true,
      });
      expect(decided.status).to.equal(200);
      const rest = await eventsUntil(await user.client.send('GET', `/canvas/runs/${runId}/events`));
      expect(rest.at(-1)?.data.status).to.equal('succeeded');
      expect(seen).to.have.length(1);
      expect(seen[0]?.nodes).to.deep.equal({
        a: 'succeeded',
        b: 'succeeded',
        approve: 'succeeded',
        w: 'running',
      });
      expect(seen[0]?.events.at(-1)).to.equal('node.status w running');
    } finally {
      witness();
    }
  });

  it('resumes a stream after Last-Event-ID with exactly the events the client had not seen', async () => {
    const all = await eventsUntil(
      await execute(user, {
        workflow: workflow(
          [
            { id: 'a', kind: 'emit' },
            { id: 'b', kind: 'emit' },
          ],
          ['a.value -> b.after'],
        ),
      }),
    );
    const runId = runIdOf(all);
    const res = await fetch(world.stack.url('runtime', `/canvas/runs/${runId}/events`), {
      headers: { authorization: `Bearer ${user.jwt}`, 'last-event-id': '3' },
    });
    const resumed = await eventsUntil(res);
    expect(resumed.map((e) => e.data.seq)).to.deep.equal(all.slice(3).map((e) => e.data.seq));
  });
});

describeEachDatabase('canvas costs', (database) => {
  let world: CanvasWorld;
  before(async () => {
    world = await startCanvasWorld({
      database,
      plugins: [{ resolve: 'canvas-llm', enabled: true, options: {} } as never],
    });
  });
  after(async () => {
    await world.close();
    world.removeData();
  });

  it('stops a run whose model turn the ledger refuses, with a clear event, not retried, charging nothing', async () => {
    const user = await canvasUser(world.stack);
    await storeAndUnlock(user.client, user.wallet, 'PROVIDER_API_KEY', 'sk-canvas-canary-key-0123456789');
    const events = await eventsUntil(
      await execute(user, {
        workflow: workflow(
          [
            { id: 'draft', kind: 'llm', params: { prompt: 'hello' }, retries: 2 },
            { id: 'after', kind: 'emit' },
          ],
          ['draft.text -> after.after'],
        ),
      }),
    );
    const failed = events.find((e) => e.event === 'node.status' && e.data.state === 'failed');
    expect(failed?.data.nodeId).to.equal('draft');
    const refusal = failed?.data.error as { code: string; message: string; details: object };
    expect(refusal.code).to.equal('payment_required');
    // Refused as the canvas run's spend, not a chat's.
    expect(refusal.details).to.include({ reason: 'minimum_balance', purpose: 'canvas_run' });
    expect(refusal.message).to.match(/^Refused: a canvas run needs an available balance of at least /);
    expect(events.some((e) => e.event === 'node.retry')).to.equal(false);
    expect(states(events, 'after')).to.deep.equal(['skipped']);
    expect(events.at(-1)?.data).to.deep.include({ status: 'failed', charged: '0' });
    expect(JSON.stringify(events)).to.not.include('sk-canvas-canary-key');
  });
});

describeEachDatabase('canvas secrets', (database) => {
  it('scrubs a vault secret a node read from every event, log line and stored output, in every encoding', async () => {
    const world = await startCanvasWorld({ database });
    try {
      const user = await canvasUser(world.stack);
      const canary = `ghp_canvas_canary_${randomBytes(12).toString('hex')}`;
      await storeAndUnlock(user.client, user.wallet, 'GITHUB_TOKEN', canary);
      const events = await eventsUntil(
        await execute(user, {
          workflow: workflow([{ id: 'careless', kind: 'leak', params: { slot: 'GITHUB_TOKEN' } }]),
        }),
      );
      const runId = runIdOf(events);
      expect(events.at(-1)?.data.status).to.equal('succeeded');
      const stored = await user.client.json('GET', `/canvas/runs/${runId}`);
      const replayed = await eventsUntil(await user.client.send('GET', `/canvas/runs/${runId}/events`));
      const seen = JSON.stringify([events, stored.body, replayed]);
      for (const encoding of encodingsOf(canary)) expect(seen).to.not.include(encoding);
      expect(seen).to.include(REDACTED);
    } finally {
      await world.close();
      world.removeData();
    }
  });
});
