/**
 * The `canvas` suite's floors: what the runtime's design must write for the steps of a run at the
 * least, with nothing of the executor around it (no scheduling, no node context, no HTTP, SSE or
 * client). Each floor run is a run of its own, created (and ended) outside the timing.
 *
 * - `nodes`: every no-op node's two changes as the executor makes them (`running` with its event;
 *   `succeeded` with its output and status events) made at once through RunStore, on the runtime's
 *   connection: its group commit writes them in one transaction, each node's row once and its 3
 *   events, the least the store can do for them (the executor's runs take a transaction per ~100
 *   nodes).
 * - `knexNodes`: the same rows and events in the same statements in one transaction, without
 *   RunStore (its batching, JSON and redaction): the database's own share.
 * - `decision`: a decision's changes through RunStore in the 2 transactions the executor commits
 *   them in (the decision, the run going on and the approval node's start; then the approval node's
 *   success, the next node's start and end, and the next approval's request).
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { RunClaims } from '../services/runtime/canvas/claims.ts';
import type { WorkflowDocument } from '../services/runtime/canvas/document.ts';
import {
  EVENT_COLUMNS,
  EVENTS_PER_INSERT,
  insertRows,
  type NewEvent,
  NODES_PER_INSERT,
  RunStore,
} from '../services/runtime/canvas/runs.ts';
import type { CanvasWorld } from './canvas-world.ts';

/** What a bench no-op node gives. */
const OUTPUTS = { value: 0 };

const status = (nodeId: string, state: string): NewEvent => ({
  type: 'node.status',
  data: { nodeId, state, attempt: 1 },
});
const output = (nodeId: string, outputs: Record<string, unknown>): NewEvent => ({
  type: 'node.output',
  data: { nodeId, outputs },
});

/** A stored run whose rows the floor changes as the executor would. */
export class FloorRun {
  private constructor(
    private readonly world: CanvasWorld,
    private readonly store: RunStore,
    readonly id: string,
    private readonly claim: string,
  ) {}

  /** A run of `nodeIds`, all queued, on a RunStore of its own on the runtime's connection. */
  static async create(world: CanvasWorld, nodeIds: readonly string[]): Promise<FloorRun> {
    const { db, clock, secrets, replica, config } = world.kernel;
    const claims = new RunClaims(db, replica, config.database.leaseSeconds * 1000);
    const store = new RunStore(db, clock, (text) => secrets.scrub(text), claims);
    const id = randomUUID();
    const claim = await store.create(
      {
        id,
        wallet: world.wallet,
        agentId: world.agentId,
        workflowId: null,
        workflowVersion: null,
        document: { name: 'floor' } as WorkflowDocument,
        inputs: {},
        previewToken: randomBytes(24).toString('base64url'),
      },
      nodeIds,
      [{ type: 'run.started', data: { runId: id } }],
      (work) => db.transaction(work),
    );
    return new FloorRun(world, store, id, claim);
  }

  /** Ends the run (a wallet may have only so many unended), outside the timing. */
  async end(): Promise<void> {
    await this.store.changeRun(this.id, 'succeeded', [{ type: 'run.ended', data: { status: 'succeeded' } }]);
    this.store.release(this.id);
  }

  /** No-op nodes `nodeIds` from start to end, their changes made in one turn: one group commit. */
  async nodes(nodeIds: readonly string[]): Promise<void> {
    const at = new Date();
    await Promise.all(
      nodeIds.flatMap((nodeId) => [
        this.store.changeNode(this.id, nodeId, { state: 'running', attempt: 1, startedAt: at }, [
          status(nodeId, 'running'),
        ]),
        this.store.changeNode(this.id, nodeId, { state: 'succeeded', outputs: OUTPUTS, endedAt: at }, [
          output(nodeId, OUTPUTS),
          status(nodeId, 'succeeded'),
        ]),
      ]),
    );
  }

  /**
   * The same rows and events as `nodes`, in the statements RunStore writes them with (events from
   * seq 2 on), in one transaction: what the database itself costs.
   */
  async knexNodes(nodeIds: readonly string[]): Promise<void> {
    const now = Date.now();
    const outputs = JSON.stringify(OUTPUTS);
    const columns = ['state', 'attempt', 'outputs', 'started_at', 'ended_at'];
    const rows = nodeIds.flatMap((nodeId) => [this.id, nodeId, 'succeeded', 1, outputs, now, now]);
    let seq = 2;
    const events = nodeIds.flatMap((nodeId) =>
      [status(nodeId, 'running'), output(nodeId, OUTPUTS), status(nodeId, 'succeeded')].flatMap((event) => [
        this.id,
        seq++,
        event.type,
        JSON.stringify(event.data),
        now,
      ]),
    );
    await this.world.kernel.db.transaction(async (trx) => {
      await insertRows(trx, 'canvas_node_runs', ['run_id', 'node_id', ...columns], rows, NODES_PER_INSERT, {
        key: ['run_id', 'node_id'],
        merge: columns,
      });
      await insertRows(trx, 'canvas_events', EVENT_COLUMNS, events, EVENTS_PER_INSERT);
    });
    // The run's next events (its end) follow these.
    await this.store.track(this.id, this.claim);
  }

  /**
   * A decision on approval node `approval` through to the next node `next` and the request of the
   * approval after it (`following`), in the executor's 2 transactions.
   */
  async decision(approval: string, next: string, following: string | undefined): Promise<void> {
    const at = new Date();
    const decision = { approved: true, decidedBy: this.world.wallet, decidedAt: at.toISOString() };
    await Promise.all([
      this.store.changeNode(this.id, approval, { state: 'queued', decision }, [
        { type: 'approval.decided', data: { nodeId: approval, ...decision } },
      ]),
      this.store.changeRun(this.id, 'running', [{ type: 'run.status', data: { status: 'running' } }]),
      this.store.changeNode(this.id, approval, { state: 'running', attempt: 1, startedAt: at }, [
        status(approval, 'running'),
      ]),
    ]);
    const approved = { approved: true };
    const second = [
      this.store.changeNode(this.id, approval, { state: 'succeeded', outputs: approved, endedAt: at }, [
        output(approval, approved),
        status(approval, 'succeeded'),
      ]),
      this.store.changeNode(this.id, next, { state: 'running', attempt: 1, startedAt: at }, [
        status(next, 'running'),
      ]),
      this.store.changeNode(this.id, next, { state: 'succeeded', outputs: OUTPUTS, endedAt: at }, [
        output(next, OUTPUTS),
        status(next, 'succeeded'),
      ]),
    ];
    if (following !== undefined)
      second.push(
        this.store.changeNode(this.id, following, { state: 'waiting_approval', startedAt: at }, [
          { type: 'node.status', data: { nodeId: following, state: 'waiting_approval' } },
          {
            type: 'approval.required',
            data: {
              nodeId: following,
              value: 0,
              valueHash: randomBytes(32).toString('hex'),
              message: `Sigil canvas approval\nRun: ${this.id}\nNode: ${following}`,
            },
          },
        ]),
        this.store.changeRun(this.id, 'waiting_approval', [
          { type: 'run.status', data: { status: 'waiting_approval' } },
        ]),
      );
    await Promise.all(second);
  }
}
