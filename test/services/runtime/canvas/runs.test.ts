import { randomBytes, randomUUID } from 'node:crypto';
import { expect } from 'chai';
import { REDACTED, SigilError } from '@sigil/plugin-api';
import type { WorkflowDocument } from '../../../../services/runtime/canvas/document.ts';
import { RunClaims } from '../../../../services/runtime/canvas/claims.ts';
import { type NewEvent, RunStore, type RunEvent } from '../../../../services/runtime/canvas/runs.ts';
import type { Kernel } from '../../../../services/kernel.ts';
import { describeEachDatabase, openTestKernel } from '../../../support/kernel.ts';

describeEachDatabase('canvas RunStore group commit', (database) => {
  let kernel: Kernel;
  let store: RunStore;
  /** Every event handed to the streams, as (run, seq, type). */
  let published: { runId: string; seq: number; type: string }[];
  let statements: string[];
  const onQuery = (query: { sql: string }) => statements.push(query.sql.toUpperCase());

  before(async () => {
    kernel = await openTestKernel({ database });
    kernel.db.on('query', onQuery);
  });
  after(async () => {
    kernel.db.off('query', onQuery);
    await kernel.close();
  });
  beforeEach(() => {
    published = [];
    statements = [];
    store = new RunStore(
      kernel.db,
      kernel.clock,
      (text) => kernel.secrets.scrub(text),
      claims(),
      (runId, events: readonly RunEvent[]) =>
        published.push(...events.map(({ seq, type }) => ({ runId, seq, type }))),
    );
  });

  /** Claims of this kernel's replica, lasting 30 s unrenewed. */
  const claims = () => new RunClaims(kernel.db, kernel.replica, 30_000);

  /** A run of `nodeIds` created through `on` (the suite's store by default) with its `started` events. */
  const newRun = async (
    nodeIds: string[],
    on: RunStore = store,
    started: NewEvent[] = [{ type: 'run.started', data: {} }],
  ) => {
    const id = randomUUID();
    await on.create(
      {
        id,
        wallet: `0x${'1'.repeat(40)}`,
        agentId: randomUUID(),
        workflowId: null,
        workflowVersion: null,
        document: { name: 'test' } as unknown as WorkflowDocument,
        inputs: {},
        previewToken: randomBytes(24).toString('base64url'),
      },
      nodeIds,
      started,
      (work) => kernel.db.transaction(work),
    );
    return id;
  };
  const commits = () => statements.filter((sql) => sql.startsWith('COMMIT')).length;

  it('stores the changes made in one turn in one transaction, numbered and published in order once committed', async () => {
    const runId = await newRun(['a', 'b']);
    published = [];
    statements = [];
    const writes = [
      store.changeNode(runId, 'a', { state: 'running', attempt: 1 }, [{ type: 'a.running', data: {} }]),
      store.changeNode(runId, 'a', { state: 'succeeded', outputs: { v: 1 } }, [
        { type: 'a.output', data: {} },
        { type: 'a.succeeded', data: {} },
      ]),
      store.changeNode(runId, 'b', { state: 'running', attempt: 1 }, [{ type: 'b.running', data: {} }]),
      store.changeRun(runId, 'waiting_approval', [{ type: 'run.status', data: {} }]),
    ];
    expect(published, 'nothing is published before its commit').to.deep.equal([]);
    const stored = await Promise.all(writes);
    expect(stored.map((events) => events.map((e) => e.seq))).to.deep.equal([[2], [3, 4], [5], [6]]);
    expect(published.map((e) => `${e.seq}:${e.type}`)).to.deep.equal([
      '2:a.running',
      '3:a.output',
      '4:a.succeeded',
      '5:b.running',
      '6:run.status',
    ]);
    expect(commits()).to.equal(1);
    // Each changed row written once: the nodes' by an upsert per set of columns changed (a: state,
    // attempt and outputs; b: state and attempt), the run's by an UPDATE, the events in one INSERT;
    // before them, one UPDATE checks the claims of the batch's runs.
    const inserts = (table: string) =>
      statements.filter((sql) => sql.startsWith('INSERT') && sql.includes(table.toUpperCase()));
    const upserts = inserts('canvas_node_runs');
    expect(upserts).to.have.length(2);
    for (const sql of upserts) expect(sql).to.include('ON CONFLICT');
    const updates = statements.filter((sql) => sql.startsWith('UPDATE'));
    expect(updates).to.have.length(2);
    expect(updates[0]).to.match(/SET .OWNER_CLAIM. = .OWNER_CLAIM. WHERE/);
    expect(inserts('canvas_events')).to.have.length(1);
    const nodes = new Map((await store.nodes(runId)).map((node) => [node.nodeId, node]));
    expect(nodes.get('a')).to.include({ state: 'succeeded', attempt: 1 });
    expect(nodes.get('a')?.outputs).to.deep.equal({ v: 1 });
    expect(nodes.get('b')).to.include({ state: 'running', attempt: 1 });
    expect((await store.events(runId, 0)).map((e) => e.seq)).to.deep.equal([1, 2, 3, 4, 5, 6]);
  });

  it('rejects every write of a batch whose transaction fails, publishes none, and numbers the next changes from where it stood', async () => {
    const runId = await newRun(['a', 'b']);
    published = [];
    // A row already holding the batch's second number makes its events' INSERT fail.
    await kernel
      .db('canvas_events')
      .insert({ run_id: runId, seq: 3, type: 'in.the.way', data: '{}', created_at: 0 });
    const writes = [
      store.changeNode(runId, 'a', { state: 'running', attempt: 1 }, [{ type: 'a.running', data: {} }]),
      store.changeNode(runId, 'b', { state: 'failed' }, [{ type: 'b.failed', data: {} }]),
      store.record(runId, [{ type: 'a.log', data: {} }]),
    ];
    const outcomes = await Promise.allSettled(writes);
    expect(outcomes.map((outcome) => outcome.status)).to.deep.equal(['rejected', 'rejected', 'rejected']);
    expect(published).to.deep.equal([]);
    expect((await store.nodes(runId)).map((node) => node.state)).to.deep.equal(['queued', 'queued']);
    expect((await store.events(runId, 0)).map((e) => e.type)).to.deep.equal(['run.started', 'in.the.way']);

    await kernel.db('canvas_events').where({ run_id: runId, seq: 3 }).delete();
    const again = await store.changeNode(runId, 'a', { state: 'running', attempt: 1 }, [
      { type: 'a.running', data: {} },
      { type: 'a.log', data: {} },
    ]);
    expect(again.map((e) => e.seq)).to.deep.equal([2, 3]);
    expect(published.map((e) => `${e.seq}:${e.type}`)).to.deep.equal(['2:a.running', '3:a.log']);
    expect((await store.nodes(runId)).find((node) => node.nodeId === 'a')?.state).to.equal('running');
  });

  it('stores and publishes events, outputs, errors and decisions scrubbed of registered secrets', async () => {
    const canary = `sk-store-canary-${randomBytes(8).toString('hex')}`;
    kernel.secrets.add(canary);
    const published: RunEvent[] = [];
    const scrubbing = new RunStore(
      kernel.db,
      kernel.clock,
      (text) => kernel.secrets.scrub(text),
      claims(),
      (_runId, events) => published.push(...events),
    );
    try {
      const runId = await newRun(['a', 'b'], scrubbing, [{ type: 'run.started', data: { note: canary } }]);
      await Promise.all([
        scrubbing.changeNode(runId, 'a', { state: 'succeeded', outputs: { [canary]: canary } }, [
          { type: 'node.output', data: { outputs: { deep: [canary] } } },
        ]),
        scrubbing.changeNode(
          runId,
          'b',
          { state: 'failed', error: { code: 'internal', message: canary }, decision: { comment: canary } },
          [{ type: 'node.log', data: { message: `the key is ${canary}` } }],
        ),
        scrubbing.changeRun(runId, 'failed', [{ type: 'run.ended', data: {} }], {
          code: 'conflict',
          message: canary,
        }),
      ]);
      const stored = JSON.stringify([
        await scrubbing.nodes(runId),
        await scrubbing.events(runId, 0),
        await kernel.db('canvas_runs').where({ id: runId }).first(),
        published,
      ]);
      expect(stored).to.not.include(canary);
      expect((await scrubbing.nodes(runId)).find((node) => node.nodeId === 'a')?.outputs).to.deep.equal({
        [REDACTED]: REDACTED,
      });
      expect(published.map((event) => JSON.parse(event.json) as unknown)).to.deep.include({
        message: `the key is ${REDACTED}`,
      });
    } finally {
      kernel.secrets.remove(canary);
    }
  });

  it('refuses a change whose JSON a redaction left invalid, and stores nothing of it', async () => {
    // "\u0001" then the rest is how JSON writes the control character U+0001 followed by it: a
    // secret that matches from the escape's digits on cuts the escape in two.
    const secret = `0001${randomBytes(8).toString('hex')}`;
    kernel.secrets.add(secret);
    try {
      const runId = await newRun(['a']);
      expect(() =>
        store.record(runId, [{ type: 'node.log', data: { message: `\u0001${secret.slice(4)}` } }]),
      ).to.throw(SyntaxError);
      expect((await store.events(runId, 0)).map((e) => e.type)).to.deep.equal(['run.started']);
    } finally {
      kernel.secrets.remove(secret);
    }
  });

  /** What a promise rejected with (undefined when it resolved). */
  const refusal = (promise: Promise<unknown>) =>
    promise.then(
      () => undefined,
      (err: unknown) => err,
    );

  it('refuses a change of a run it does not track, alone', async () => {
    const runId = await newRun(['a']);
    const other = randomUUID();
    const untracked = store.record(other, [{ type: 'lost', data: {} }]);
    const tracked = store.record(runId, [{ type: 'kept', data: {} }]);
    expect(await refusal(untracked))
      .to.be.instanceOf(SigilError)
      .and.deep.include({ code: 'unavailable', details: { reason: 'run_claim_lost', runId: other } });
    expect((await tracked).map((e) => e.seq)).to.deep.equal([2]);
  });

  it("stores nothing more of a run whose claim another replica took over, in the same transaction as another run's changes that it stores", async () => {
    const [lost, kept] = [await newRun(['a']), await newRun(['a'])];
    // Another replica took `lost` over: a new claim in its row.
    await kernel.db('canvas_runs').where({ id: lost }).update({ owner_claim: randomUUID() });
    published = [];
    const writes = [
      store.changeNode(lost, 'a', { state: 'succeeded', outputs: { v: 1 } }, [{ type: 'a.done', data: {} }]),
      store.changeRun(lost, 'succeeded', [{ type: 'run.ended', data: {} }]),
      store.changeNode(kept, 'a', { state: 'succeeded', outputs: { v: 2 } }, [{ type: 'a.done', data: {} }]),
    ];
    const [node, run, other] = await Promise.all(writes.map(refusal));
    for (const err of [node, run])
      expect(err)
        .to.be.instanceOf(SigilError)
        .and.deep.include({ details: { reason: 'run_claim_lost', runId: lost } });
    expect(other).to.equal(undefined);
    expect((await store.nodes(lost))[0]).to.include({ state: 'queued', outputs: null });
    expect((await store.events(lost, 0)).map((e) => e.type)).to.deep.equal(['run.started']);
    expect(await kernel.db('canvas_runs').where({ id: lost }).first('status', 'ended_at')).to.deep.equal({
      status: 'running',
      ended_at: null,
    });
    expect((await store.nodes(kept))[0]).to.deep.include({ state: 'succeeded', outputs: { v: 2 } });
    expect(published).to.deep.equal([{ runId: kept, seq: 2, type: 'a.done' }]);
    // This process writes the run no more, whatever its row says later.
    expect(store.claimsHeld().has(lost)).to.equal(false);
    expect(await refusal(store.record(lost, [{ type: 'late', data: {} }]))).to.deep.include({
      details: { reason: 'run_claim_lost', runId: lost },
    });
  });
});
