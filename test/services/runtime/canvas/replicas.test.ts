import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import { databaseNowMs } from '../../../../core/db/database.ts';
import { observe } from '../../../fixtures/canvas/observe.ts';
import { eventually } from '../../../support/eventually.ts';
import { describeEachDatabase, stickyDatabase } from '../../../support/kernel.ts';
import { readSse, runtimeClient, type SseEvent } from '../chat-support.ts';
import {
  approvalFlow,
  canvasUser,
  type CanvasUser,
  type CanvasWorld,
  eventsUntil,
  execute,
  fundedCanvasUser,
  LLM_NODE,
  modelTurnsServed,
  nodeCharges,
  runIdOf,
  startCanvasWorld,
  waitingForApproval,
  workflow,
} from './support.ts';

const USD = 1_000_000n;
/** database.leaseSeconds: a run's claim lasts 3 s unrenewed, renewed every second. */
const LEASE_SECONDS = 3;
/** runtime.canvas.replicaPollMs */
const POLL_MS = 100;

/**
 * The `observe` node's act, for a test: the first node to act waits until `release`, the others go
 * on at once. `calls` counts the acts, on any runtime.
 */
function firstWaits() {
  let release: () => void = () => undefined;
  const released = new Promise<void>((resolve) => (release = resolve));
  let entered: () => void = () => undefined;
  const first = new Promise<void>((resolve) => (entered = resolve));
  let calls = 0;
  let returned = 0;
  observe(async () => {
    calls++;
    if (calls === 1) {
      entered();
      await released;
    }
    returned++;
  });
  return { first, release, calls: () => calls, returned: () => returned };
}

/**
 * Scale-out (issue #29, WP5): two runtimes on one database, as two replicas behind a load balancer,
 * sharing the canvas data directory. Each unended run is executed by the one replica that claims it
 * (canvas_runs.owner_*, renewed while it runs); another takes it over only once that replica is dead or
 * its claim ran out, and a replica that lost a run stores nothing more of it. Cancellations and
 * approvals reach the run's replica through the database; a stream on any replica reads the stored
 * events, from Last-Event-ID on.
 */
describe('canvas runs across replicas: one replica executes a run, another takes over a dead one’s', function () {
  this.timeout(120_000);

  describeEachDatabase('canvas replicas', (database) => {
    let sticky: ReturnType<typeof stickyDatabase>;
    let a: CanvasWorld;
    let b: CanvasWorld | undefined;
    let release: (() => void) | undefined;

    const start = (dataDir?: string) =>
      startCanvasWorld({
        database: sticky.database,
        ...(dataDir ? { dataDir } : {}),
        plugins: LLM_NODE,
        replicas: { shared: true, leaseSeconds: LEASE_SECONDS },
        canvas: { replicaPollMs: POLL_MS },
      });
    /** Runtime B, started now on A's database and data directory. */
    const startB = async () => (b = await start(a.dataDir));

    beforeEach(async () => {
      sticky = stickyDatabase(database);
      a = await start();
    });
    afterEach(async () => {
      release?.();
      release = undefined;
      observe();
      await b?.close();
      b = undefined;
      await a.close();
      a.removeData();
      await sticky.drop();
    });

    /** `user`'s client of `world`'s runtime. */
    const clientOn = async (world: CanvasWorld, user: CanvasUser) =>
      runtimeClient(world.stack.url('runtime'), await world.stack.signIn(user.wallet));

    /** The run's claim, as stored. */
    const ownerOf = async (runId: string) =>
      (await a.stack.kernel
        .db('canvas_runs')
        .where({ id: runId })
        .first('owner_replica', 'owner_claim', 'owner_until')) as {
        owner_replica: string | null;
        owner_claim: string | null;
        owner_until: number | string | null;
      };

    /** The run's stored events. */
    const storedEvents = (runId: string) => a.stack.runtime.canvas.runs.events(runId, 0);

    /** Starts `document` on A and reads its stream until `until` (its first node acting, by default). */
    async function runOnA(user: CanvasUser, document: unknown, until: (e: SseEvent) => boolean) {
      const events = await readSse(await execute(user, { workflow: document }), until);
      return runIdOf(events);
    }

    it('a live replica’s run is neither resumed by a replica starting nor taken by its passes; once its claim runs out (it stalled) another takes it and the first stores nothing more', async () => {
      const user = await canvasUser(a.stack);
      const observed = firstWaits();
      release = observed.release;
      const runId = await runOnA(
        user,
        workflow([{ id: 'wait', kind: 'observe', retries: 1 }]),
        (e) => e.event === 'node.status' && e.data.state === 'running',
      );
      await observed.first;
      const claimed = await ownerOf(runId);
      expect(claimed.owner_replica).to.equal(a.stack.kernel.replica.id);

      const started = await startB();
      expect(await started.stack.runtime.canvas.takeOverFreeRuns()).to.equal(0);
      expect(started.stack.runtime.canvas.executor.get(runId)).to.equal(undefined);
      // A renews its claim while the run runs.
      await eventually(
        'a renewal of the claim',
        async () => Number((await ownerOf(runId)).owner_until) > Number(claimed.owner_until),
      );
      expect(await started.stack.runtime.canvas.takeOverFreeRuns()).to.equal(0);
      expect((await ownerOf(runId)).owner_claim).to.equal(claimed.owner_claim);

      // A stalls past its claim: B takes the run over, once, and runs the node again (its retry).
      await a.stack.kernel
        .db('canvas_runs')
        .where({ id: runId })
        .update({ owner_until: databaseNowMs(a.stack.kernel.db) });
      expect(await started.stack.runtime.canvas.takeOverFreeRuns()).to.equal(1);
      expect(await started.stack.runtime.canvas.takeOverFreeRuns()).to.equal(0);
      expect((await ownerOf(runId)).owner_replica).to.equal(started.stack.kernel.replica.id);
      const onB = await clientOn(started, user);
      const events = await eventsUntil(await onB.send('GET', `/canvas/runs/${runId}/events`));
      expect(events.at(-1)?.data.status).to.equal('succeeded');
      expect(events.find((e) => e.event === 'run.resumed')?.data.interrupted).to.deep.equal(['wait']);
      // A's next renewal finds the claim taken: the run stops there; its node, let go, stores nothing.
      await eventually('A letting go of the run', async () => !a.stack.runtime.canvas.executor.get(runId));
      const stored = await storedEvents(runId);
      observed.release();
      await eventually('A’s node returning', async () => observed.returned() === 2);
      await a.stack.runtime.canvas.runs.idle();
      expect(await storedEvents(runId)).to.deep.equal(stored);
      expect(observed.calls()).to.equal(2);
    });

    it('a replica that dies mid-run: another takes the run over once and finishes it; the node that charged is neither run nor charged again', async () => {
      const user = await fundedCanvasUser(a.stack, USD);
      const observed = firstWaits();
      release = observed.release;
      const runId = await runOnA(
        user,
        workflow(
          [
            // Retries, so that a node not stored as done would be run (and charged) again.
            { id: 'draft', kind: 'llm', params: { prompt: 'hello there world' }, retries: 2 },
            { id: 'wait', kind: 'observe', retries: 1 },
          ],
          ['draft.text -> wait.after'],
        ),
        (e) => e.event === 'node.status' && e.data.nodeId === 'wait' && e.data.state === 'running',
      );
      await observed.first;
      const charged = await nodeCharges(user, runId, 'draft');
      expect(charged).to.have.length(1);

      // A dies: no heartbeat, its registration gone. B starting takes its run over at once.
      await a.stack.kernel.replica.close();
      const started = await startB();
      expect(started.stack.runtime.canvas.executor.get(runId)).to.not.equal(undefined);
      expect(await started.stack.runtime.canvas.takeOverFreeRuns()).to.equal(0);
      const onB = await clientOn(started, user);
      const events = await eventsUntil(await onB.send('GET', `/canvas/runs/${runId}/events`));
      const ended = events.at(-1);
      expect(ended?.data.status).to.equal('succeeded');
      const seqs = events.map((e) => e.data.seq);
      expect(seqs).to.deep.equal(seqs.map((_, i) => i + 1));
      const resumed = events.findIndex((e) => e.event === 'run.resumed');
      expect(events[resumed]?.data.interrupted).to.deep.equal(['wait']);
      expect(events.filter((e) => e.event === 'run.resumed')).to.have.length(1);
      const after = events.slice(resumed);
      expect(after.filter((e) => e.data.nodeId === 'draft' || e.event === 'cost')).to.deep.equal([]);
      expect([modelTurnsServed(a.stack), modelTurnsServed(started.stack)]).to.deep.equal([1, 0]);
      expect(await nodeCharges(user, runId, 'draft')).to.deep.equal(charged);
      expect(ended?.data.charged).to.equal(String(charged[0]));

      // A was only cut off: its node returns, and A stores nothing of it.
      const stored = await storedEvents(runId);
      observed.release();
      await eventually('A’s node returning', async () => observed.returned() === 2);
      await eventually('A letting go of the run', async () => !a.stack.runtime.canvas.executor.get(runId));
      await a.stack.runtime.canvas.runs.idle();
      expect(await storedEvents(runId)).to.deep.equal(stored);
    });

    it('a cancellation and a decision sent through B are carried out by A; of two decisions at once, on A and on B, one is taken', async () => {
      const user = await canvasUser(a.stack);
      const started = await startB();
      const onB = await clientOn(started, user);

      const hanging = await runOnA(
        user,
        workflow([{ id: 'spin', kind: 'hang' }]),
        (e) => e.event === 'node.log',
      );
      const cancelled = await onB.json('POST', `/canvas/runs/${hanging}/cancel`);
      expect(cancelled.status, JSON.stringify(cancelled.body)).to.equal(202);
      const events = await eventsUntil(await onB.send('GET', `/canvas/runs/${hanging}/events`));
      expect(events.find((e) => e.event === 'run.cancelling')?.data.reason).to.equal('cancelled_by_owner');
      expect(events.filter((e) => e.event === 'node.status').map((e) => e.data.state)).to.deep.equal([
        'running',
        'cancelled',
      ]);
      expect(events.at(-1)?.data.status).to.equal('cancelled');
      expect(started.stack.runtime.canvas.executor.get(hanging)).to.equal(undefined);
      expect((await ownerOf(hanging)).owner_replica).to.equal(a.stack.kernel.replica.id);
      const again = await onB.json('POST', `/canvas/runs/${hanging}/cancel`);
      expect(again.status).to.equal(409);
      expect(again.body.details.reason).to.equal('run_ended');

      const waiting = await runOnA(user, approvalFlow, waitingForApproval);
      const decide = (client: typeof onB, approved: boolean) =>
        client.json('POST', `/canvas/runs/${waiting}/nodes/approve/decision`, { approved });
      const [approvedOnB, rejectedOnA] = await Promise.all([decide(onB, true), decide(user.client, false)]);
      const statuses = [approvedOnB.status, rejectedOnA.status];
      expect(statuses.sort()).to.deep.equal([200, 409]);
      const approved = approvedOnB.status === 200;
      const rest = await eventsUntil(await onB.send('GET', `/canvas/runs/${waiting}/events`));
      expect(rest.filter((e) => e.event === 'approval.decided').map((e) => e.data.approved)).to.deep.equal([
        approved,
      ]);
      expect(rest.at(-1)?.data.status).to.equal(approved ? 'succeeded' : 'failed');
      expect(started.stack.runtime.canvas.executor.get(waiting)).to.equal(undefined);
      if (approved) {
        const written = join(a.dataDir, 'runs', waiting, 'workspace', 'write.json');
        expect(JSON.parse(readFileSync(written, 'utf8'))).to.equal('<h1>Hello</h1>');
      }
    });

    it('a stream served by B resumes from Last-Event-ID and follows the run, across its change of hands, with every event once and in order', async () => {
      const user = await canvasUser(a.stack);
      const runId = await runOnA(user, approvalFlow, waitingForApproval);
      const started = await startB();
      const jwt = await started.stack.signIn(user.wallet);
      const stream = await fetch(started.stack.url('runtime', `/canvas/runs/${runId}/events`), {
        headers: { authorization: `Bearer ${jwt}`, 'last-event-id': '2' },
      });
      const reading = eventsUntil(stream);

      // A dies while B streams its run; B takes the run over, then the owner approves through B.
      await a.stack.kernel.replica.close();
      expect(await started.stack.runtime.canvas.takeOverFreeRuns()).to.equal(1);
      const decided = await runtimeClient(started.stack.url('runtime'), jwt).json(
        'POST',
        `/canvas/runs/${runId}/nodes/approve/decision`,
        { approved: true },
      );
      expect(decided.status, JSON.stringify(decided.body)).to.equal(200);
      const events = await reading;
      expect(events.at(-1)?.data.status).to.equal('succeeded');
      const stored = await storedEvents(runId);
      expect(events.map((e) => [e.data.seq, e.event])).to.deep.equal(
        stored.filter((e) => e.seq > 2).map((e) => [e.seq, e.type]),
      );
      expect(events.map((e) => e.event)).to.include.members(['run.resumed', 'approval.decided']);
    });
  });
});
