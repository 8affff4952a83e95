import type { Knex } from 'knex';
import { SigilError } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import { type Database, dialectOf } from '../../../core/db/database.ts';
import { runClaimLost, type RunClaims } from './claims.ts';
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
  /** A cancellation asked through any replica (its reason), which the run's replica carries out. */
  cancelRequested: string | null;
  createdAt: Date;
  updatedAt: Date;
  endedAt: Date | null;
}

/** A run as `create` stores it: what its request gives. */
export type NewRun = Omit<
  RunRecord,
  'status' | 'error' | 'cancelRequested' | 'createdAt' | 'updatedAt' | 'endedAt'
>;

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
  cancel_requested: string | null;
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
  cancelRequested: row.cancel_requested,
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

/** A run this process writes: the number of its next event, and its claim (the fence of its writes). */
interface TrackedRun {
  nextSeq: number;
  claim: string;
}

/** One change of a run, queued for the next transaction of its lane. */
interface RunWrite {
  runId: string;
  /** A node's row: its key and the columns the change sets. */
  node?: Record<string, unknown>;
  run?: Record<string, unknown>;
  events: readonly SerializedEvent[];
}

/** Runs `work` in one transaction (of the caller's choosing: one that holds a lock first). */
export type InTransaction = <T>(work: (trx: Knex.Transaction) => Promise<T>) => Promise<T>;

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
 *
 * A run is written by the one replica that holds its claim (RunClaims): each transaction first checks
 * the claims of its runs (a write that locks their rows), and the changes of a run whose claim was
 * taken over are refused (`run_claim_lost`), stored nowhere, as is every later change of it here.
 */
export class RunStore {
  /** The runs this process is writing (see `track`). */
  private readonly tracked = new Map<string, TrackedRun>();
  private readonly writes = new GroupCommit<RunWrite, RunEvent[] | SigilError>((batch) => this.commit(batch));
  private readonly oneLane: boolean;

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
    /** Replaces registered secrets in text: every event, output, error and decision is stored through it. */
    private readonly scrub: (text: string) => string,
    private readonly claims: RunClaims,
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

  /**
   * Takes up writing a run's events after those stored, under `claim` (a run taken over from a
   * replica that stopped or died).
   */
  async track(runId: string, claim: string): Promise<void> {
    const last = await this.db('canvas_events').where({ run_id: runId }).max({ seq: 'seq' }).first();
    this.tracked.set(runId, { nextSeq: Number(last?.seq ?? 0) + 1, claim });
  }

  /** The claims of the runs this process writes (run id → claim). */
  claimsHeld(): Map<string, string> {
    return new Map([...this.tracked].map(([runId, { claim }]) => [runId, claim]));
  }

  private laneOf(runId: string): string {
    return this.oneLane ? '' : runId;
  }

  private async enqueue(write: RunWrite): Promise<RunEvent[]> {
    if (!this.tracked.has(write.runId)) throw runClaimLost(write.runId);
    const stored = await this.writes.add(this.laneOf(write.runId), write);
    if (stored instanceof SigilError) throw stored;
    return stored;
  }

  /** The run's changes not yet committed (on SQLite, all runs'). */
  backlog(runId: string): number {
    return this.writes.backlog(this.laneOf(runId));
  }

  /** Resolves once every change made so far has been committed or refused. */
  idle(): Promise<void> {
    return this.writes.idle();
  }

  private async commit(batch: RunWrite[]): Promise<(RunEvent[] | SigilError)[]> {
    const now = this.clock.now();
    const at = now.toISOString();
    const createdAt = now.getTime();
    const claims = new Map<string, string>();
    for (const { runId } of batch) {
      const tracked = this.tracked.get(runId);
      if (tracked) claims.set(runId, tracked.claim);
    }
    const firstSeq = new Map<string, number>();
    let stored: (RunEvent[] | SigilError)[] = [];
    try {
      await this.db.transaction(async (trx) => {
        const held = await this.claims.held(trx, claims);
        const eventValues: Knex.Value[] = [];
        stored = batch.map(({ runId, events }) => {
          const tracked = this.tracked.get(runId);
          if (!tracked || !held.has(runId)) return runClaimLost(runId);
          const seq = tracked.nextSeq;
          if (!firstSeq.has(runId)) firstSeq.set(runId, seq);
          tracked.nextSeq = seq + events.length;
          return events.map(({ type, json }, index) => {
            eventValues.push(runId, seq + index, type, json, createdAt);
            return { seq: seq + index, type, json, at };
          });
        });
        const kept = batch.filter(({ runId }) => held.has(runId));
        for (const { columns, written, values } of nodeRowGroups(kept))
          await insertRows(trx, 'canvas_node_runs', written, values, NODES_PER_INSERT, {
            key: NODE_KEY,
            merge: columns,
          });
        const runs = new Map<string, Record<string, unknown>>();
        for (const { runId, run } of kept) if (run) runs.set(runId, { ...runs.get(runId), ...run });
        for (const [runId, row] of runs) await trx('canvas_runs').where({ id: runId }).update(row);
        await insertRows(trx, 'canvas_events', EVENT_COLUMNS, eventValues, EVENTS_PER_INSERT);
      });
    } catch (err) {
      // Nothing of the batch was stored: its numbers are given again to the next changes.
      for (const [runId, seq] of firstSeq) {
        const tracked = this.tracked.get(runId);
        if (tracked) tracked.nextSeq = seq;
      }
      throw err;
    }
    batch.forEach(({ runId }, i) => {
      const events = stored[i] as RunEvent[] | SigilError;
      // A run taken over by another replica is written no more here.
      if (events instanceof SigilError) this.tracked.delete(runId);
      else this.onStored(runId, events);
    });
    return stored;
  }

  /**
   * Stores a new run, its nodes queued and its first events, claimed by this replica: its claim. The
   * rows are written in the transaction `transaction` opens (the service's holds the wallet's lock and
   * counts its active runs first); the run is tracked and its events published once that commits.
   */
  async create(
    run: NewRun,
    nodeIds: readonly string[],
    events: readonly NewEvent[],
    transaction: InTransaction,
  ): Promise<string> {
    const now = this.clock.now().getTime();
    const at = new Date(now).toISOString();
    const stored = this.serialized(events).map(({ type, json }, index) => ({
      seq: index + 1,
      type,
      json,
      at,
    }));
    const { claim, columns } = this.claims.forNewRun();
    await transaction(async (trx) => {
      await trx('canvas_runs').insert({
        ...columns,
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
    this.tracked.set(run.id, { nextSeq: stored.length + 1, claim });
    this.onStored(run.id, stored);
    return claim;
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

  /** Writes no more of the run here (it ended, or this process let go of it). */
  release(runId: string): void {
    this.tracked.delete(runId);
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
  async activeCount(trx: Knex.Transaction, wallet: string): Promise<number> {
    const found = await trx('canvas_runs').where({ wallet }).whereNull('ended_at').count({ n: '*' }).first();
    return Number(found?.n ?? 0);
  }

  /** A run by its id alone, whoever's it is (one this replica takes over). */
  async byId(id: string): Promise<RunRecord> {
    const row = (await this.db('canvas_runs').where({ id }).first()) as RunRow | undefined;
    if (!row) throw runNotFound(id);
    return runRecord(row);
  }

  /**
   * Asks the run's replica, whichever it is, to cancel it (with `reason`; a cancellation asked before
   * keeps its own): false when the run has ended.
   */
  async requestCancel(runId: string, reason: string): Promise<boolean> {
    const asked = await this.db('canvas_runs')
      .where({ id: runId })
      .whereNull('ended_at')
      .update({ cancel_requested: this.db.raw('coalesce(cancel_requested, ?)', [reason]) });
    return asked === 1;
  }

  /**
   * Stores the owner's decision on an approval node, compare-and-set, while the node waits for one
   * and its run is neither ended nor being cancelled: of decisions sent at once through any replicas,
   * exactly one is stored; false for the others. The run's replica then goes on with it.
   */
  async storeDecision(runId: string, nodeId: string, decision: Record<string, unknown>): Promise<boolean> {
    const stored = await this.db('canvas_node_runs')
      .where({ run_id: runId, node_id: nodeId, state: 'waiting_approval' })
      .whereNull('decision')
      .whereIn(
        'run_id',
        this.db('canvas_runs')
          .select('id')
          .where({ id: runId })
          .whereNull('ended_at')
          .whereNull('cancel_requested'),
      )
      .update({ decision: this.json(decision) });
    return stored === 1;
  }

  /**
   * What was asked, through any replica, of the unended runs `replica` executes: cancellations, and
   * decisions on approval nodes still waiting there.
   */
  async requests(replica: string): Promise<{
    cancels: { runId: string; reason: string }[];
    decisions: { runId: string; nodeId: string; decision: Record<string, unknown> }[];
  }> {
    const owned = () => this.db('canvas_runs').where({ owner_replica: replica }).whereNull('ended_at');
    const cancels = (await owned().whereNotNull('cancel_requested').select('id', 'cancel_requested')) as {
      id: string;
      cancel_requested: string;
    }[];
    const decisions = (await this.db('canvas_node_runs')
      .whereIn('run_id', owned().select('id'))
      .where({ state: 'waiting_approval' })
      .whereNotNull('decision')
      .select('run_id', 'node_id', 'decision')) as { run_id: string; node_id: string; decision: string }[];
    return {
      cancels: cancels.map((row) => ({ runId: row.id, reason: row.cancel_requested })),
      decisions: decisions.map((row) => ({
        runId: row.run_id,
        nodeId: row.node_id,
        decision: JSON.parse(row.decision) as Record<string, unknown>,
      })),
    };
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
