import type { Knex } from 'knex';
import { SigilError } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import { type Database, dialectOf } from '../../../core/db/database.ts';
import type { WorkflowDocument } from './document.ts';
import { GroupCommit } from './group-commit.ts';

export type RunStatus = 'running' | 'waiting_approval' | 'succeeded' | 'failed' | 'cancelled';
export type NodeState =
  'queued' | 'running' | 'waiting_approval' | 'succeeded' | 'failed' | 'skipped' | 'cancelled';

export const ENDED_RUN: readonly RunStatus[] = ['succeeded', 'failed', 'cancelled'];
export const ENDED_NODE: readonly NodeState[] = ['succeeded', 'failed', 'skipped', 'cancelled'];

/** What failed, as events and the run's record show it: a stable code and a message safe to show. */
export interface RunError {
  code: string;
  message: string;
  reason?: string;
  hint?: string;
  details?: Record<string, unknown>;
}

export interface RunEvent {
  seq: number;
  type: string;
  /** The event's data, an object, as stored: JSON text scrubbed of registered secrets. */
  json: string;
  at: string;
}

export interface RunRecord {
  id: string;
  wallet: string;
  agentId: string;
  workflowId: string | null;
  workflowVersion: number | null;
  document: WorkflowDocument;
  inputs: Record<string, unknown>;
  status: RunStatus;
  error: RunError | null;
  previewToken: string;
  createdAt: Date;
  updatedAt: Date;
  endedAt: Date | null;
}

export interface NodeRecord {
  nodeId: string;
  state: NodeState;
  attempt: number;
  outputs: Record<string, unknown> | null;
  error: RunError | null;
  decision: Record<string, unknown> | null;
  startedAt: Date | null;
  endedAt: Date | null;
}

export interface NodeChange {
  state: NodeState;
  attempt?: number;
  outputs?: Record<string, unknown>;
  error?: RunError;
  decision?: Record<string, unknown>;
  startedAt?: Date;
  endedAt?: Date;
}

export interface NewEvent {
  type: string;
  data: Record<string, unknown>;
}

interface RunRow {
  id: string;
  wallet: string;
  agent_id: string;
  workflow_id: string | null;
  workflow_version: number | null;
  document: string;
  inputs: string;
  status: RunStatus;
  error: string | null;
  preview_token: string;
  created_at: string | number;
  updated_at: string | number;
  ended_at: string | number | null;
}

interface NodeRow {
  node_id: string;
  state: NodeState;
  attempt: number;
  outputs: string | null;
  error: string | null;
  decision: string | null;
  started_at: string | number | null;
  ended_at: string | number | null;
}

const time = (value: string | number | null): Date | null =>
  value === null ? null : new Date(Number(value));
const parsed = <T>(value: string | null): T | null => (value === null ? null : (JSON.parse(value) as T));

const runRecord = (row: RunRow): RunRecord => ({
  id: row.id,
  wallet: row.wallet,
  agentId: row.agent_id,
  workflowId: row.workflow_id,
  workflowVersion: row.workflow_version === null ? null : Number(row.workflow_version),
  document: JSON.parse(row.document) as WorkflowDocument,
  inputs: JSON.parse(row.inputs) as Record<string, unknown>,
  status: row.status,
  error: parsed<RunError>(row.error),
  previewToken: row.preview_token,
  createdAt: new Date(Number(row.created_at)),
  updatedAt: new Date(Number(row.updated_at)),
  endedAt: time(row.ended_at),
});

const nodeRecord = (row: NodeRow): NodeRecord => ({
  nodeId: row.node_id,
  state: row.state,
  attempt: Number(row.attempt),
  outputs: parsed(row.outputs),
  error: parsed(row.error),
  decision: parsed(row.decision),
  startedAt: time(row.started_at),
  endedAt: time(row.ended_at),
});

const runNotFound = (id: string) =>
  new SigilError('not_found', `No run ${id}`, { details: { reason: 'run_not_found', id } });

/**
 * An event as a change queues it: its data already JSON, made when the change is (what the object
 * becomes later is not stored).
 */
interface SerializedEvent {
  type: string;
  json: string;
}

/** One change of a run, queued for the next transaction of its lane. */
interface RunWrite {
  runId: string;
  /** A node's row: its key and the columns the change sets. */
  node?: Record<string, unknown>;
  run?: Record<string, unknown>;
  events: readonly SerializedEvent[];
}

/** Rows an event insert carries: 5 bound variables each, under SQLite's oldest limit of 999 a statement. */
export const EVENTS_PER_INSERT = 150;
export const EVENT_COLUMNS = ['run_id', 'seq', 'type', 'data', 'created_at'];
/** Node rows an insert or upsert carries: at most 9 columns each, under the same limit. */
export const NODES_PER_INSERT = 100;
const NODE_KEY = ['run_id', 'node_id'];
const NODE_COLUMNS = ['state', 'attempt', 'outputs', 'error', 'decision', 'started_at', 'ended_at'];

/**
 * Inserts rows of `columns` (their values one row after another in `values`), at most `perStatement`
 * rows a statement; an upsert that sets `merge` on a conflict on `key` when given. Written by hand
 * in SQL both databases read, rather than through knex's insert, which writes SQLite's multi-row
 * inserts as a UNION ALL of one SELECT a row: with VALUES lists SQLite took half the CPU (and knex no
 * longer quotes and aliases each column of each row).
 */
export async function insertRows(
  db: Database,
  table: string,
  columns: readonly string[],
  values: readonly Knex.Value[],
  perStatement: number,
  upsert?: { key: readonly string[]; merge: readonly string[] },
): Promise<void> {
  const quoted = (names: readonly string[]) => names.map((name) => `"${name}"`).join(', ');
  const row = `(${columns.map(() => '?').join(', ')})`;
  const onConflict = upsert
    ? ` ON CONFLICT (${quoted(upsert.key)}) DO UPDATE SET ${upsert.merge.map((name) => `"${name}" = excluded."${name}"`).join(', ')}`
    : '';
  const perStatementValues = perStatement * columns.length;
  for (let i = 0; i < values.length; i += perStatementValues) {
    const bindings = values.slice(i, i + perStatementValues);
    const rows = Array.from({ length: bindings.length / columns.length }, () => row).join(', ');
    await db.raw(`INSERT INTO "${table}" (${quoted(columns)}) VALUES ${rows}${onConflict}`, bindings);
  }
}

/**
 * The node rows a batch changes, each once (later values winning), in groups of rows that set the same
 * columns: each group is written by multi-row upserts (the rows exist since the run was created, so
 * each is an update), not by an UPDATE a row, whose statement took SQLite's driver ~55 µs of the main
 * thread each on a loaded machine.
 */
function nodeRowGroups(batch: readonly RunWrite[]) {
  const merged = new Map<string, Record<string, unknown>>();
  for (const { runId, node } of batch) {
    if (!node) continue;
    const key = `${runId}\n${node.node_id as string}`;
    const row = merged.get(key);
    if (row) Object.assign(row, node);
    else merged.set(key, { ...node });
  }
  const groups = new Map<string, { columns: string[]; written: string[]; values: Knex.Value[] }>();
  for (const row of merged.values()) {
    const columns = NODE_COLUMNS.filter((column) => column in row);
    const key = columns.join();
    const group = groups.get(key) ?? { columns, written: [...NODE_KEY, ...columns], values: [] };
    for (const column of group.written) group.values.push(row[column] as Knex.Value);
    groups.set(key, group);
  }
  return groups.values();
}

/**
 * Runs, their nodes' states and their events in the database. A change of a node or a run is stored
 * with the events it causes, numbered per run, and its events are handed to `onStored` only once
 * committed, in their order: what a client streams is what was stored, and a run read back after a
 * restart is where its events left it.
 *
 * Changes are group-committed (GroupCommit): all changes made while a transaction commits go into the
 * next one, which writes each changed row once and the rows and events in a few multi-row statements.
 * A run's changes commit in the order they were made (one lane a run; on SQLite, whose one
 * connection serialises everything, one lane for all), so the stored state is always a prefix of
 * what happened, whichever write a crash interrupts.
 */
export class RunStore {
  /** The next event number of each run this process is writing (see `track`). */
  private readonly nextSeq = new Map<string, number>();
  private readonly writes = new GroupCommit<RunWrite, RunEvent[]>((batch) => this.commit(batch));
  private readonly oneLane: boolean;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    /** Replaces registered secrets in text: every event, output, error and decision is stored through it. */
    private readonly scrub: (text: string) => string,
    private readonly onStored: (runId: string, events: readonly RunEvent[]) => void = () => undefined,
  ) {
    this.oneLane = dialectOf(db) === 'sqlite';
  }

  /**
   * `value` as the JSON text stored and streamed, scrubbed of registered secrets. A text the scrub
   * changed is parsed again: a secret's form that began inside a JSON escape would leave it invalid.
   */
  private json(value: unknown): string {
    const text = JSON.stringify(value);
    const scrubbed = this.scrub(text);
    if (scrubbed !== text) JSON.parse(scrubbed);
    return scrubbed;
  }

  private serialized(events: readonly NewEvent[]): SerializedEvent[] {
    return events.map(({ type, data }) => ({ type, json: this.json(data) }));
  }

  /** Takes up writing a run's events after those stored (a run resumed after a restart). */
  async track(runId: string): Promise<void> {
    const last = await this.db('canvas_events').where({ run_id: runId }).max({ seq: 'seq' }).first();
    this.nextSeq.set(runId, Number(last?.seq ?? 0) + 1);
  }

  private laneOf(runId: string): string {
    return this.oneLane ? '' : runId;
  }

  private enqueue(write: RunWrite): Promise<RunEvent[]> {
    if (!this.nextSeq.has(write.runId))
      return Promise.reject(new SigilError('internal', `Run ${write.runId} is not tracked by this process`));
    return this.writes.add(this.laneOf(write.runId), write);
  }

  /** The run's changes not yet committed (on SQLite, all runs'). */
  backlog(runId: string): number {
    return this.writes.backlog(this.laneOf(runId));
  }

  /** Resolves once every change made so far has been committed or refused. */
  idle(): Promise<void> {
    return this.writes.idle();
  }

  private async commit(batch: RunWrite[]): Promise<RunEvent[][]> {
    const now = this.clock.now();
    const at = now.toISOString();
    const createdAt = now.getTime();
    const firstSeq = new Map<string, number>();
    const eventValues: Knex.Value[] = [];
    const stored = batch.map(({ runId, events }) => {
      const seq = this.nextSeq.get(runId) ?? 1;
      if (!firstSeq.has(runId)) firstSeq.set(runId, seq);
      this.nextSeq.set(runId, seq + events.length);
      return events.map(({ type, json }, index) => {
        eventValues.push(runId, seq + index, type, json, createdAt);
        return { seq: seq + index, type, json, at };
      });
    });
    const runs = new Map<string, Record<string, unknown>>();
    for (const { runId, run } of batch) if (run) runs.set(runId, { ...runs.get(runId), ...run });
    try {
      await this.db.transaction(async (trx) => {
        for (const { columns, written, values } of nodeRowGroups(batch))
          await insertRows(trx, 'canvas_node_runs', written, values, NODES_PER_INSERT, {
            key: NODE_KEY,
            merge: columns,
          });
        for (const [runId, row] of runs) await trx('canvas_runs').where({ id: runId }).update(row);
        await insertRows(trx, 'canvas_events', EVENT_COLUMNS, eventValues, EVENTS_PER_INSERT);
      });
    } catch (err) {
      // Nothing of the batch was stored: its numbers are given again to the next changes.
      for (const [runId, seq] of firstSeq) this.nextSeq.set(runId, seq);
      throw err;
    }
    batch.forEach(({ runId }, i) => this.onStored(runId, stored[i] as RunEvent[]));
    return stored;
  }

  async create(
    run: Omit<RunRecord, 'status' | 'error' | 'createdAt' | 'updatedAt' | 'endedAt'>,
    nodeIds: readonly string[],
    events: readonly NewEvent[],
  ): Promise<RunEvent[]> {
    const now = this.clock.now().getTime();
    const at = new Date(now).toISOString();
    const stored = this.serialized(events).map(({ type, json }, index) => ({
      seq: index + 1,
      type,
      json,
      at,
    }));
    await this.db.transaction(async (trx) => {
      await trx('canvas_runs').insert({
        id: run.id,
        wallet: run.wallet,
        agent_id: run.agentId,
        workflow_id: run.workflowId,
        workflow_version: run.workflowVersion,
        document: JSON.stringify(run.document),
        inputs: JSON.stringify(run.inputs),
        status: 'running',
        preview_token: run.previewToken,
        created_at: now,
        updated_at: now,
      });
      await insertRows(
        trx,
        'canvas_node_runs',
        [...NODE_KEY, 'state', 'attempt'],
        nodeIds.flatMap((nodeId) => [run.id, nodeId, 'queued', 0]),
        NODES_PER_INSERT,
      );
      await insertRows(
        trx,
        'canvas_events',
        EVENT_COLUMNS,
        stored.flatMap((event) => [run.id, event.seq, event.type, event.json, now]),
        EVENTS_PER_INSERT,
      );
    });
    this.nextSeq.set(run.id, stored.length + 1);
    this.onStored(run.id, stored);
    return stored;
  }

  /** Changes a node's state and records the events it causes, in one transaction. */
  changeNode(
    runId: string,
    nodeId: string,
    change: NodeChange,
    events: readonly NewEvent[],
  ): Promise<RunEvent[]> {
    const row: Record<string, unknown> = { run_id: runId, node_id: nodeId, state: change.state };
    if (change.attempt !== undefined) row.attempt = change.attempt;
    if (change.outputs !== undefined) row.outputs = this.json(change.outputs);
    if (change.error !== undefined) row.error = this.json(change.error);
    if (change.decision !== undefined) row.decision = this.json(change.decision);
    if (change.startedAt !== undefined) row.started_at = change.startedAt.getTime();
    if (change.endedAt !== undefined) row.ended_at = change.endedAt.getTime();
    return this.enqueue({ runId, node: row, events: this.serialized(events) });
  }

  /** Changes the run's status (ending it when the status is final) with its events. */
  changeRun(
    runId: string,
    status: RunStatus,
    events: readonly NewEvent[],
    error?: RunError,
  ): Promise<RunEvent[]> {
    const now = this.clock.now().getTime();
    const run = {
      status,
      updated_at: now,
      ...(error ? { error: this.json(error) } : {}),
      ...(ENDED_RUN.includes(status) ? { ended_at: now } : {}),
    };
    return this.enqueue({ runId, run, events: this.serialized(events) });
  }

  /** Events that change no state (a node's log line, a cost). */
  record(runId: string, events: readonly NewEvent[]): Promise<RunEvent[]> {
    return this.enqueue({ runId, events: this.serialized(events) });
  }

  /** Forgets an ended run's event counter. */
  release(runId: string): void {
    this.nextSeq.delete(runId);
  }

  /** The wallet's run (404 for anyone else's). */
  async get(wallet: string, id: string): Promise<RunRecord> {
    const row = (await this.db('canvas_runs').where({ id, wallet }).first()) as RunRow | undefined;
    if (!row) throw runNotFound(id);
    return runRecord(row);
  }

  async byPreviewToken(token: string): Promise<RunRecord | undefined> {
    const row = (await this.db('canvas_runs').where({ preview_token: token }).first()) as RunRow | undefined;
    return row ? runRecord(row) : undefined;
  }

  async nodes(runId: string): Promise<NodeRecord[]> {
    const rows = (await this.db('canvas_node_runs').where({ run_id: runId })) as NodeRow[];
    return rows.map(nodeRecord);
  }

  async list(wallet: string, limit: number, before?: Date): Promise<RunRecord[]> {
    const query = this.db('canvas_runs').where({ wallet });
    if (before) query.where('created_at', '<', before.getTime());
    return ((await query.orderBy('created_at', 'desc').limit(limit)) as RunRow[]).map(runRecord);
  }

  /** The wallet's runs that have not ended. */
  async activeCount(wallet: string): Promise<number> {
    const found = await this.db('canvas_runs')
      .where({ wallet })
      .whereNull('ended_at')
      .count({ n: '*' })
      .first();
    return Number(found?.n ?? 0);
  }

  /** Every run not yet ended: what a starting runtime picks up again. */
  async unfinished(): Promise<RunRecord[]> {
    return ((await this.db('canvas_runs').whereNull('ended_at').orderBy('created_at')) as RunRow[]).map(
      runRecord,
    );
  }

  /** What the run's nodes were charged so far: the sum of its `cost` events. */
  async charged(runId: string): Promise<bigint> {
    const rows = (await this.db('canvas_events').where({ run_id: runId, type: 'cost' }).select('data')) as {
      data: string;
    }[];
    return rows.reduce(
      (sum, row) => sum + BigInt((JSON.parse(row.data) as { charged?: string }).charged ?? 0),
      0n,
    );
  }

  async events(runId: string, afterSeq: number): Promise<RunEvent[]> {
    const rows = await this.db('canvas_events')
      .where({ run_id: runId })
      .andWhere('seq', '>', afterSeq)
      .orderBy('seq');
    return (rows as { seq: number; type: string; data: string; created_at: string | number }[]).map(
      (row) => ({
        seq: Number(row.seq),
        type: row.type,
        json: row.data,
        at: new Date(Number(row.created_at)).toISOString(),
      }),
    );
  }
}
