/**
 * The `canvas` suite's database floor: the rows the executor stores for a step of a run, written
 * straight through knex on the runtime's own connection in the transactions RunStore makes (one per
 * change of a node or of the run: its UPDATE, then an INSERT of the events it causes), with nothing
 * of the executor around them: no scheduling, redaction, HTTP or SSE.
 */
import { randomUUID } from 'node:crypto';
import type { Database } from '../core/db/database.ts';

/** One transaction as RunStore makes it: the row it changes and how many events it appends. */
export interface StoredChange {
  table: 'canvas_node_runs' | 'canvas_runs';
  events: number;
}

/** A no-op node from start to end: `running` (one event), then `succeeded` (its output and status). */
export const NODE_CHANGES: readonly StoredChange[] = [
  { table: 'canvas_node_runs', events: 1 },
  { table: 'canvas_node_runs', events: 2 },
];

/**
 * From an approval's decision to the next node's start: the decision (`approval.decided`), the run
 * running again (`run.status`), the approval node running and succeeding, the next node running.
 */
export const APPROVAL_CHANGES: readonly StoredChange[] = [
  { table: 'canvas_node_runs', events: 1 },
  { table: 'canvas_runs', events: 1 },
  { table: 'canvas_node_runs', events: 1 },
  { table: 'canvas_node_runs', events: 2 },
  { table: 'canvas_node_runs', events: 1 },
];

/** A stored run (of `nodes` queued nodes) whose rows the floor changes as the executor would. */
export class FloorRun {
  private seq = 1;

  private constructor(
    private readonly db: Database,
    readonly id: string,
  ) {}

  static async create(db: Database, wallet: string, agentId: string, nodes: number): Promise<FloorRun> {
    const id = randomUUID();
    const now = Date.now();
    await db('canvas_runs').insert({
      id,
      wallet,
      agent_id: agentId,
      document: '{}',
      inputs: '{}',
      status: 'running',
      preview_token: randomUUID(),
      created_at: now,
      updated_at: now,
    });
    const rows = Array.from({ length: nodes }, (_, i) => ({
      run_id: id,
      node_id: `n${i + 1}`,
      state: 'queued',
      attempt: 0,
    }));
    for (let i = 0; i < rows.length; i += 100) await db('canvas_node_runs').insert(rows.slice(i, i + 100));
    return new FloorRun(db, id);
  }

  /**
   * What a store that batches could write instead: each node's final row and its three events,
   * `nodeIds.length` nodes in one transaction (one upsert of the rows, one insert of the events).
   */
  async writeBatch(nodeIds: readonly string[]): Promise<void> {
    const now = Date.now();
    const rows = nodeIds.map((nodeId) => ({
      run_id: this.id,
      node_id: nodeId,
      state: 'succeeded',
      attempt: 1,
      outputs: '{"value":0}',
      started_at: now,
      ended_at: now,
    }));
    const events = nodeIds.flatMap((nodeId) => this.events(nodeId, 3, now));
    await this.db.transaction(async (trx) => {
      await trx('canvas_node_runs')
        .insert(rows)
        .onConflict(['run_id', 'node_id'])
        .merge(['state', 'attempt', 'outputs', 'started_at', 'ended_at']);
      await trx('canvas_events').insert(events);
    });
  }

  /** The run's next `count` event rows, of the size of a node's status event. */
  private events(nodeId: string, count: number, now: number) {
    return Array.from({ length: count }, () => ({
      run_id: this.id,
      seq: this.seq++,
      type: 'node.status',
      data: JSON.stringify({ nodeId, state: 'succeeded', attempt: 1 }),
      created_at: now,
    }));
  }

  /** Writes `changes` to node `nodeId`'s row (or the run's), one transaction each, one after another. */
  async write(nodeId: string, changes: readonly StoredChange[]): Promise<void> {
    for (const change of changes) {
      const now = Date.now();
      const events = this.events(nodeId, change.events, now);
      await this.db.transaction(async (trx) => {
        if (change.table === 'canvas_runs')
          await trx('canvas_runs').where({ id: this.id }).update({ status: 'running', updated_at: now });
        else
          await trx('canvas_node_runs')
            .where({ run_id: this.id, node_id: nodeId })
            .update({ state: 'succeeded', attempt: 1, outputs: '{"value":0}', ended_at: now });
        await trx('canvas_events').insert(events);
      });
    }
  }
}

/** Runs `work` with SQLite's `synchronous` set to `mode` on the connection, then sets it back. */
export async function withSynchronous<T>(db: Database, mode: 'NORMAL', work: () => Promise<T>): Promise<T> {
  const [previous] = (await db.raw('PRAGMA synchronous')) as { synchronous: number }[];
  await db.raw(`PRAGMA synchronous = ${mode}`);
  try {
    return await work();
  } finally {
    await db.raw(`PRAGMA synchronous = ${previous?.synchronous ?? 2}`);
  }
}
