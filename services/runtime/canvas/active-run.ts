import type { CanvasApprovalV2 } from '@sigil/plugin-api';
import type { Renewal } from '../../../core/db/renewal.ts';
import { ENDED_NODE, type NodeRecord, type NodeState, type RunRecord, type RunStatus } from './runs.ts';
import type { PlannedNode, ValidatedWorkflow } from './validate.ts';

/** A run this process is executing: its plan and the in-memory state mirrored in the store. */
export class ActiveRun {
  readonly states = new Map<string, NodeState>();
  readonly outputs = new Map<string, Record<string, unknown>>();
  readonly decisions = new Map<string, CanvasApprovalV2>();
  readonly attempts = new Map<string, number>();
  readonly running = new Set<string>();
  /** Queued nodes whose upstream nodes have all succeeded, in the order they became ready. */
  readonly ready = new Set<string>();
  /** Queued nodes an upstream node ended without succeeding: they will be skipped. */
  readonly blocked = new Set<string>();
  readonly queued = new Set<string>();
  readonly waiting = new Set<string>();
  failed = 0;
  /** Per node, its upstream nodes that have not succeeded yet. */
  private readonly unmet = new Map<string, number>();
  readonly abort = new AbortController();
  /** Resolves once the run has ended. */
  readonly ended: Promise<void>;
  status: RunStatus = 'running';
  cancelled = false;
  /** Set at shutdown: nodes stop where they are, left `running` in the store for the next process. */
  stopping = false;
  /** The attempts in flight, awaited at shutdown. */
  readonly tasks = new Set<Promise<void>>();
  /** The owner's latest authenticated request (what unlocks the vault for the nodes). */
  principal: unknown;
  /** Money charged for the run's nodes so far, in base units. */
  charged = 0n;
  /** Keeps this replica's claim on the run while it runs here. */
  renewal: Renewal | undefined;
  private end: () => void = () => undefined;
  readonly approvalTimers = new Map<string, NodeJS.Timeout>();
  /** The attempts running, which the run's abort aborts (one listener on its signal, not one each). */
  private readonly attemptAborts = new Set<AttemptAbort>();

  constructor(
    readonly record: RunRecord,
    readonly plan: ValidatedWorkflow,
  ) {
    this.ended = new Promise((resolve) => {
      this.end = resolve;
    });
    const { signal } = this.abort;
    signal.addEventListener(
      'abort',
      () => {
        for (const attempt of this.attemptAborts) attempt.abort(signal.reason);
      },
      { once: true },
    );
  }

  /**
   * The run as stored: its nodes' attempts, outputs, decisions and states, a node stored `running`
   * taken as `running` (what another replica runs) or as given (`queued`: to run again here).
   */
  static fromStored(
    record: RunRecord,
    plan: ValidatedWorkflow,
    nodes: readonly NodeRecord[],
    running: NodeState,
  ): ActiveRun {
    const run = new ActiveRun(record, plan);
    const states = new Map<string, NodeState>();
    for (const node of nodes) {
      run.attempts.set(node.nodeId, node.attempt);
      if (node.outputs) run.outputs.set(node.nodeId, node.outputs);
      if (node.decision) run.decisions.set(node.nodeId, node.decision as unknown as CanvasApprovalV2);
      states.set(node.nodeId, node.state === 'running' ? running : node.state);
    }
    run.index(states);
    return run;
  }

  /** A node attempt's abort: with the run's, or after `timeoutMs`; its `done` once the attempt ends. */
  attemptAbort(timeoutMs: number): AttemptAbort {
    return new AttemptAbort(this.attemptAborts, this.abort.signal, timeoutMs);
  }

  node(id: string): PlannedNode {
    return this.plan.nodes.get(id) as PlannedNode;
  }

  /** Takes every node's state (all queued, or as stored) and works out which can start. */
  index(states: ReadonlyMap<string, NodeState>): void {
    for (const id of this.plan.order) {
      const state = states.get(id) ?? 'queued';
      this.states.set(id, state);
      if (state === 'failed') this.failed++;
      if (state === 'waiting_approval') this.waiting.add(id);
    }
    for (const id of this.plan.order) {
      const upstream = this.node(id).upstream.map((up) => this.states.get(up) as NodeState);
      const unmet = upstream.filter((state) => state !== 'succeeded').length;
      this.unmet.set(id, unmet);
      if (this.states.get(id) !== 'queued') continue;
      this.queued.add(id);
      if (upstream.some((state) => ENDED_NODE.includes(state) && state !== 'succeeded')) this.blocked.add(id);
      else if (unmet === 0) this.ready.add(id);
    }
  }

  /** Sets a node's state and passes what it means on to the nodes it feeds (O(its edges), not O(nodes)). */
  set(id: string, state: NodeState): void {
    const previous = this.states.get(id) as NodeState;
    this.states.set(id, state);
    for (const set of [this.queued, this.ready, this.blocked, this.waiting]) set.delete(id);
    if (state === 'queued') {
      this.queued.add(id);
      if (this.unmet.get(id) === 0) this.ready.add(id);
    }
    if (state === 'waiting_approval') this.waiting.add(id);
    if (state === 'failed') this.failed++;
    if (!ENDED_NODE.includes(state) || ENDED_NODE.includes(previous)) return;
    for (const next of this.node(id).downstream) {
      if (!this.queued.has(next)) continue;
      if (state !== 'succeeded') {
        this.ready.delete(next);
        this.blocked.add(next);
        continue;
      }
      const unmet = (this.unmet.get(next) as number) - 1;
      this.unmet.set(next, unmet);
      if (unmet === 0 && !this.blocked.has(next)) this.ready.add(next);
    }
  }

  finish(): void {
    for (const timer of this.approvalTimers.values()) clearTimeout(timer);
    this.end();
  }
}

/**
 * What aborts a node attempt: its run's abort, or its timeout (a TimeoutError). Its AbortSignal is
 * made only when the node reads it: an AbortController costs ~7 µs in Node 20 (a listener on the
 * run's signal each, and AbortSignal.any with AbortSignal.timeout, cost more), and most nodes end
 * without looking.
 */
export class AttemptAbort {
  aborted = false;
  private reason: unknown;
  private controller: AbortController | undefined;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly running: Set<AttemptAbort>,
    runSignal: AbortSignal,
    timeoutMs: number,
  ) {
    if (runSignal.aborted) this.abort(runSignal.reason);
    else running.add(this);
    this.timer = setTimeout(
      () => this.abort(new DOMException('The node timed out', 'TimeoutError')),
      timeoutMs,
    );
    this.timer.unref();
  }

  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  abort(reason: unknown): void {
    if (this.aborted) return;
    this.aborted = true;
    this.reason = reason;
    this.controller?.abort(reason);
  }

  throwIfAborted(): void {
    if (this.aborted) throw this.reason;
  }

  /** Lets go of the timer and of the run. */
  done(): void {
    clearTimeout(this.timer);
    this.running.delete(this);
  }
}
