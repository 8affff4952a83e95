import { setTimeout as delay } from 'node:timers/promises';
import {
  type CanvasApprovalV2,
  type CanvasNodeContextV2,
  type CanvasServicesV2,
  isSigilError,
  SigilError,
} from '@sigil/plugin-api';
import { Renewal } from '../../../core/db/renewal.ts';
import type { Logger } from '../../../core/log.ts';
import { ActiveRun } from './active-run.ts';
import type { RunArtifacts } from './artifacts.ts';
import { approvalRequest } from './approvals.ts';
import { isRunClaimLost, runClaimLost, type RunClaims } from './claims.ts';
import type { CanvasSettings } from './config.ts';
import { RUN_ENDED } from './events.ts';
import { checkOutputs, runErrorOf } from './outputs.ts';
import {
  type NewEvent,
  type NodeChange,
  type NodeRecord,
  type RunError,
  type RunEvent,
  type RunRecord,
  type RunStatus,
  type RunStore,
} from './runs.ts';
import type { ValidatedWorkflow } from './validate.ts';
import type { Workspaces } from './workspaces.ts';

/** What a run's nodes may ask of the host, made per run (its wallet, agent and the latest sign-in). */
export type ServicesFor = (run: ActiveRun, nodeId: string, attempt: number) => CanvasServicesV2;

export interface ExecutorDeps {
  /** Stores runs' changes and hands their events to the streams once committed. */
  store: RunStore;
  /** This replica's claims on the runs it executes. */
  claims: RunClaims;
  /** Told when a run stops here because another replica took it over (its streams read the store). */
  relinquished(runId: string): void;
  artifacts: RunArtifacts;
  workspaces: Workspaces;
  settings: CanvasSettings;
  services: ServicesFor;
  logger: Logger;
  /** Replaces registered secrets in text: what a node's outputs pass on to the nodes it feeds. */
  scrub(text: string): string;
  now(): Date;
}

/**
 * Runs canvas workflows: nodes in topological order, independent branches in parallel (at most
 * `maxParallelNodes` a run), each node's state and events stored before they are streamed. A small
 * executor on the runtime's own database rather than a durable-execution library: those that fit
 * Node need a server of their own (Temporal, Inngest, Restate) or PostgreSQL alone (DBOS,
 * graphile-worker, pg-boss), and the runtime runs on SQLite by default (docs/canvas.md, "Engine").
 */
export class CanvasExecutor {
  private readonly active = new Map<string, ActiveRun>();

  constructor(private readonly deps: ExecutorDeps) {}

  get(runId: string): ActiveRun | undefined {
    return this.active.get(runId);
  }

  /** The ids of the runs this process executes. */
  executing(): Set<string> {
    return new Set(this.active.keys());
  }

  /** Starts a new run (already stored with its `run.started` event, under `claim`). */
  start(record: RunRecord, plan: ValidatedWorkflow, principal: unknown, claim: string): ActiveRun {
    const run = new ActiveRun(record, plan);
    run.principal = principal;
    for (const id of plan.order) run.attempts.set(id, 0);
    run.index(new Map());
    this.hold(run, claim);
    this.pump(run);
    return run;
  }

  /**
   * Takes up, under `claim`, a run another process left unfinished (it stopped, or died): finished
   * nodes keep their outputs, approvals still wait (or go on with a decision stored meanwhile), and a
   * node that was running is run again by its policy (a write node with the same idempotency key, so
   * what it writes is written once) or failed when it has no attempt left.
   */
  async resume(
    record: RunRecord,
    plan: ValidatedWorkflow,
    nodes: readonly NodeRecord[],
    charged: bigint,
    claim: string,
  ): Promise<ActiveRun> {
    const run = ActiveRun.fromStored(record, plan, nodes, 'queued');
    run.charged = charged;
    this.hold(run, claim);
    const interrupted = nodes.filter((node) => node.state === 'running').map((node) => node.nodeId);
    await this.emit(run, [{ type: 'run.resumed', data: { interrupted } }]);
    for (const id of interrupted) {
      const planned = run.node(id);
      const attempts = run.attempts.get(id) ?? 0;
      if (planned.plugin.effect !== 'writes' && attempts > planned.spec.retries)
        await this.failNode(run, id, {
          code: 'unavailable',
          reason: 'interrupted',
          message: `Node ${id} was running when the runtime stopped, and has no retry left`,
        });
    }
    for (const id of run.waiting) {
      const decided = run.decisions.get(id);
      if (decided) await this.applyDecision(run, id, decided);
      else this.armApprovalTimeout(run, id);
    }
    this.pump(run);
    return run;
  }

  /** Executes the run here under `claim`, renewed while it runs; a renewal that finds it lost lets go. */
  private hold(run: ActiveRun, claim: string): void {
    const runId = run.record.id;
    this.active.set(runId, run);
    run.renewal = new Renewal(this.deps.claims.lifetimeMs, () => this.deps.claims.renew(runId, claim), {
      lost: () => runClaimLost(runId),
      failed: (err) =>
        this.deps.logger.warn({ err, runId }, "canvas: renewing a run's claim failed; trying again"),
    });
    run.renewal.signal.addEventListener('abort', () => this.relinquish(run), { once: true });
  }

  /**
   * Another replica took the run over (this one stalled past its claim): it stops here at once, its
   * nodes aborted, and stores nothing more (its writes are fenced by the claim).
   */
  private relinquish(run: ActiveRun): void {
    const runId = run.record.id;
    if (this.active.get(runId) !== run) return;
    this.active.delete(runId);
    this.deps.logger.warn({ runId }, 'canvas: another replica took this run over; it stops here');
    halt(run, runClaimLost(runId));
    this.deps.store.release(runId);
    this.deps.relinquished(runId);
  }

  /** Starts whatever can start; ends the run when nothing runs, waits or can start. */
  private pump(run: ActiveRun): void {
    if (run.stopping || (run.status !== 'running' && run.status !== 'waiting_approval')) return;
    const failFast = run.plan.document.failurePolicy === 'fail-fast';
    // Settling a node takes it out of these sets, and skipping one blocks the queued nodes it feeds,
    // which the loop over `blocked` then reaches (a Set's iteration visits what is added during it).
    if (run.cancelled) for (const id of run.queued) this.settleQueued(run, id, 'cancelled');
    else if (failFast && run.failed > 0) for (const id of run.queued) this.settleQueued(run, id, 'skipped');
    for (const id of run.blocked) this.settleQueued(run, id, 'skipped');
    for (const id of run.ready) {
      if (run.running.size >= this.deps.settings.maxParallelNodes) break;
      this.launch(run, id);
    }
    if (run.running.size > 0) {
      if (run.status === 'waiting_approval') void this.setStatus(run, 'running');
      return;
    }
    if (run.waiting.size > 0) {
      if (run.status !== 'waiting_approval') void this.setStatus(run, 'waiting_approval');
      return;
    }
    void this.endRun(run);
  }

  /** A queued node that will never run: skipped (an upstream failed) or cancelled. */
  private settleQueued(run: ActiveRun, id: string, state: 'skipped' | 'cancelled'): void {
    run.set(id, state);
    void this.change(run, id, { state, endedAt: this.deps.now() }, [
      { type: 'node.status', data: { nodeId: id, state } },
    ]);
  }

  private launch(run: ActiveRun, id: string): void {
    const planned = run.node(id);
    if (planned.plugin.effect === 'approval' && !run.decisions.has(id)) {
      this.requestApproval(run, id);
      return;
    }
    run.running.add(id);
    run.set(id, 'running');
    const task = this.execute(run, id)
      .catch((err: unknown) =>
        this.deps.logger.error(
          { err, runId: run.record.id, nodeId: id },
          'canvas: a node failed unexpectedly',
        ),
      )
      .finally(() => {
        run.running.delete(id);
        run.tasks.delete(task);
        this.pump(run);
      });
    run.tasks.add(task);
  }

  /**
   * Asks for the owner's decision. The run's `waiting_approval` status, which the pump then sets, is
   * stored after the request (a run's changes commit in order), mostly in the same transaction.
   */
  private requestApproval(run: ActiveRun, id: string): void {
    run.set(id, 'waiting_approval');
    const request = approvalRequest(run.record.id, id, this.inputsOf(run, id).value);
    void this.change(run, id, { state: 'waiting_approval', startedAt: this.deps.now() }, [
      { type: 'node.status', data: { nodeId: id, state: 'waiting_approval' } },
      { type: 'approval.required', data: { nodeId: id, ...request } },
    ]);
    this.armApprovalTimeout(run, id);
  }

  private armApprovalTimeout(run: ActiveRun, id: string): void {
    const timer = setTimeout(() => {
      if (run.states.get(id) !== 'waiting_approval') return;
      this.deps.logger.info(
        { runId: run.record.id, nodeId: id },
        'canvas: an approval timed out; the run is cancelled',
      );
      void this.cancel(run, 'approval_timeout');
    }, this.deps.settings.approvalTimeoutSeconds * 1000);
    timer.unref();
    run.approvalTimers.set(id, timer);
  }

  /** Refuses (409) unless the node waits for an approval. */
  requireWaiting(run: ActiveRun, id: string): void {
    if (run.states.get(id) !== 'waiting_approval')
      throw new SigilError('conflict', `Node ${id} is not waiting for an approval`, {
        details: { reason: 'not_waiting_approval', nodeId: id, state: run.states.get(id) ?? null },
      });
  }

  /**
   * Goes on with the owner's decision on a waiting approval node, stored already (by whichever replica
   * took it): records it and runs the node. Nothing when the node no longer waits (cancelled).
   */
  async applyDecision(run: ActiveRun, id: string, decision: CanvasApprovalV2): Promise<void> {
    if (run.states.get(id) !== 'waiting_approval') return;
    clearTimeout(run.approvalTimers.get(id));
    run.decisions.set(id, decision);
    run.set(id, 'queued');
    // Made in one turn, so stored in one transaction (GroupCommit): the decision, the run going on,
    // and the approval node's start, which this pump makes.
    const stored = [
      this.change(run, id, { state: 'queued', decision: decision as unknown as Record<string, unknown> }, [
        { type: 'approval.decided', data: { ...decision } },
      ]),
    ];
    if (run.status === 'waiting_approval') stored.push(this.setStatus(run, 'running'));
    this.pump(run);
    await Promise.all(stored);
  }

  /** Cancels a run: queued and waiting nodes are cancelled, running ones aborted. */
  async cancel(run: ActiveRun, reason = 'cancelled_by_owner'): Promise<void> {
    if (run.cancelled) return;
    run.cancelled = true;
    run.abort.abort(new SigilError('conflict', 'The run was cancelled', { details: { reason } }));
    await this.emit(run, [{ type: 'run.cancelling', data: { reason } }]);
    for (const id of run.waiting) this.settleQueued(run, id, 'cancelled');
    this.pump(run);
  }

  /** Runs a node's attempts until one succeeds or none is left. */
  private async execute(run: ActiveRun, id: string): Promise<void> {
    const planned = run.node(id);
    const { effect } = planned.plugin;
    for (;;) {
      const attempt = (run.attempts.get(id) ?? 0) + 1;
      run.attempts.set(id, attempt);
      await this.stored(
        run,
        effect === 'writes' || effect === 'approval',
        this.change(run, id, { state: 'running', attempt, startedAt: this.deps.now() }, [
          { type: 'node.status', data: { nodeId: id, state: 'running', attempt } },
        ]),
      );
      // Another replica took the run over meanwhile: the node does not act here.
      if (run.stopping) return;
      const outcome = await this.attempt(run, id, attempt);
      if (run.stopping) return;
      if ('outputs' in outcome) {
        run.outputs.set(id, outcome.outputs);
        run.set(id, 'succeeded');
        // A node that wrote or spent (a model turn, a tool call) is stored as done before the run goes
        // on: after a crash it is never run, so charged, twice.
        await this.stored(
          run,
          effect === 'writes' || effect === 'reads',
          this.change(run, id, { state: 'succeeded', outputs: outcome.outputs, endedAt: this.deps.now() }, [
            { type: 'node.output', data: { nodeId: id, outputs: outcome.outputs } },
            { type: 'node.status', data: { nodeId: id, state: 'succeeded', attempt } },
          ]),
        );
        return;
      }
      if (run.cancelled) {
        run.set(id, 'cancelled');
        await this.change(run, id, { state: 'cancelled', endedAt: this.deps.now() }, [
          { type: 'node.status', data: { nodeId: id, state: 'cancelled', attempt } },
        ]);
        return;
      }
      if (attempt > planned.spec.retries || !outcome.retryable) {
        await this.failNode(run, id, outcome.error, attempt);
        return;
      }
      const backoffMs = this.deps.settings.retryBackoffMs * 2 ** (attempt - 1);
      await this.emit(run, [
        { type: 'node.retry', data: { nodeId: id, attempt, error: outcome.error, backoffMs } },
      ]);
      await delay(backoffMs, undefined, { signal: run.abort.signal }).catch(() => undefined);
    }
  }

  private async failNode(run: ActiveRun, id: string, error: RunError, attempt?: number): Promise<void> {
    run.set(id, 'failed');
    await this.change(run, id, { state: 'failed', error, endedAt: this.deps.now() }, [
      { type: 'node.status', data: { nodeId: id, state: 'failed', ...(attempt ? { attempt } : {}), error } },
    ]);
  }

  /** One attempt: the node's outputs, checked against its ports, or what went wrong. */
  private async attempt(
    run: ActiveRun,
    id: string,
    attempt: number,
  ): Promise<{ outputs: Record<string, unknown> } | { error: RunError; retryable: boolean }> {
    const planned = run.node(id);
    const timeoutMs = (planned.spec.timeoutSeconds ?? this.deps.settings.nodeTimeoutSeconds) * 1000;
    const abort = run.attemptAbort(timeoutMs);
    const { deps } = this;
    let services: CanvasServicesV2 | undefined;
    const approvals =
      planned.plugin.effect === 'approval'
        ? [run.decisions.get(id) as CanvasApprovalV2]
        : planned.approvals.map((approval) => run.decisions.get(approval)).filter((d) => d !== undefined);
    try {
      if (
        planned.plugin.effect === 'writes' &&
        (approvals.length === 0 || approvals.some((d) => !d.approved))
      )
        throw new SigilError('forbidden', `Write node ${id} has no approved approval upstream`, {
          details: { reason: 'approval_required', nodeId: id },
        });
      const context: CanvasNodeContextV2<unknown> = {
        runId: run.record.id,
        nodeId: id,
        attempt,
        idempotencyKey: `canvas:${run.record.id}:${id}`,
        params: planned.params,
        inputs: this.inputsOf(run, id),
        approvals,
        log: (message, data) => {
          void this.emit(run, [
            {
              type: 'node.log',
              data: { nodeId: id, message: String(message).slice(0, 4000), ...(data ? { data } : {}) },
            },
          ]);
        },
        get signal() {
          return abort.signal;
        },
        workspace: await this.deps.workspaces.of(run.record),
        artifacts: {
          put: async (name, contentType, content) => {
            const stored = await this.deps.artifacts.put(run.record.id, id, name, contentType, content);
            const artifact = {
              id: stored.id,
              name: stored.name,
              contentType: stored.contentType,
              bytes: stored.bytes,
              sha256: stored.sha256,
            };
            await this.emit(run, [{ type: 'node.artifact', data: { nodeId: id, ...artifact } }]);
            return artifact;
          },
        },
        // Made once, when the node first asks (its idempotency keys count its calls).
        get services() {
          return (services ??= deps.services(run, id, attempt));
        },
      };
      const outputs = await planned.plugin.run(context as CanvasNodeContextV2);
      abort.throwIfAborted();
      // A copy, scrubbed as the store scrubs what it writes: the nodes it feeds see what is stored.
      const json = checkOutputs(planned, outputs, this.deps.settings.maxOutputBytes);
      return { outputs: JSON.parse(this.deps.scrub(json)) as Record<string, unknown> };
    } catch (err) {
      const timedOut = abort.aborted && !run.abort.signal.aborted;
      const error = timedOut
        ? {
            code: 'unavailable',
            reason: 'node_timeout',
            message: `Node ${id} took longer than ${timeoutMs / 1000} s`,
          }
        : runErrorOf(err);
      if (!isSigilError(err) && !timedOut && !run.cancelled)
        this.deps.logger.warn({ err, runId: run.record.id, nodeId: id }, 'canvas: a node failed');
      return { error, retryable: RETRIED_CODES.has(error.code) };
    } finally {
      abort.done();
    }
  }

  /** The value on each fed input port: a run input or an upstream node's output. */
  inputsOf(run: ActiveRun, id: string): Record<string, unknown> {
    const inputs: Record<string, unknown> = {};
    for (const [port, source] of Object.entries(run.node(id).inputs)) {
      const value =
        source.node === '$inputs'
          ? run.record.inputs[source.port]
          : run.outputs.get(source.node)?.[source.port];
      if (value !== undefined) inputs[port] = value;
    }
    return inputs;
  }

  private setStatus(run: ActiveRun, status: RunStatus): Promise<void> {
    run.status = status;
    return this.logged(
      run,
      this.deps.store.changeRun(run.record.id, status, [{ type: 'run.status', data: { status } }]),
    );
  }

  private async endRun(run: ActiveRun): Promise<void> {
    if (this.active.get(run.record.id) !== run) return;
    this.active.delete(run.record.id);
    run.renewal?.stop();
    const states = [...run.states.values()];
    const status: RunStatus = run.cancelled
      ? 'cancelled'
      : states.includes('failed')
        ? 'failed'
        : 'succeeded';
    run.status = status;
    const failed = [...run.states].filter(([, state]) => state === 'failed').map(([id]) => id);
    const error: RunError | undefined =
      status === 'failed'
        ? {
            code: 'conflict',
            reason: 'nodes_failed',
            message: `Nodes failed: ${failed.join(', ')}`,
            details: { nodes: failed },
          }
        : undefined;
    await this.logged(
      run,
      this.deps.store.changeRun(
        run.record.id,
        status,
        [{ type: RUN_ENDED, data: { status, charged: run.charged.toString(), ...(error ? { error } : {}) } }],
        error,
      ),
    );
    this.deps.store.release(run.record.id);
    run.finish();
  }

  private change(run: ActiveRun, id: string, change: NodeChange, events: NewEvent[]): Promise<void> {
    return this.logged(run, this.deps.store.changeNode(run.record.id, id, change, events));
  }

  /** Records events that change no state (logs, costs, retries). */
  emit(run: ActiveRun, events: NewEvent[]): Promise<void> {
    return this.logged(run, this.deps.store.record(run.record.id, events));
  }

  /**
   * Waits for a node's change to be stored when `mustWait`: a `writes` node starts acting, and ends,
   * only once the store says so, as an `approval` node starts (on a stored decision) and a `reads`
   * node ends (what it spent is not spent again). Other changes are written behind: the run goes on
   * at once (the run's changes commit in order, so a crash leaves the store at an earlier point of
   * the run, from which `none` and `approval` nodes may run again, and whatever a `writes` node waits
   * for holds all before it), unless the run's uncommitted changes are many (backpressure).
   */
  private async stored(run: ActiveRun, mustWait: boolean, change: Promise<void>): Promise<void> {
    if (mustWait || this.deps.store.backlog(run.record.id) >= MAX_WRITE_BEHIND) await change;
  }

  /**
   * Waits for a change to be stored; a failure is logged, not thrown (the run goes on in memory),
   * but one refused because another replica took the run over stops the run here.
   */
  private async logged(run: ActiveRun, stored: Promise<RunEvent[]>): Promise<void> {
    try {
      await stored;
    } catch (err) {
      if (isRunClaimLost(err)) this.relinquish(run);
      else this.deps.logger.error({ err, runId: run.record.id }, 'canvas: storing a run event failed');
    }
  }

  /**
   * Aborts every run this process executes and waits for their nodes to stop (shutdown), then lets go
   * of their claims: stored, they are free for another replica (or the next process) to take up.
   */
  async stop(): Promise<void> {
    const runs = [...this.active.values()];
    for (const run of runs) halt(run, new SigilError('unavailable', 'The runtime is stopping'));
    await Promise.allSettled(runs.flatMap((run) => [...run.tasks]));
    // What the nodes did before they stopped, written behind them, is stored for the next process.
    await this.deps.store.idle();
    const held = this.deps.store.claimsHeld();
    for (const runId of held.keys()) this.deps.store.release(runId);
    // Not let go (the database unreachable), the claims run out within their lifetime.
    await this.deps.claims
      .release(held)
      .catch((err: unknown) =>
        this.deps.logger.warn({ err }, "canvas: letting go of the runs' claims failed; they run out"),
      );
    this.active.clear();
  }
}

/**
 * Stops the run where it is in this process (`reason` aborts its nodes): its claim no longer renewed,
 * it is left as stored for whichever replica takes it up.
 */
function halt(run: ActiveRun, reason: SigilError): void {
  run.renewal?.stop();
  run.stopping = true;
  run.abort.abort(reason);
  run.finish();
}

/** Uncommitted changes of a run (on SQLite, of all runs) beyond which nodes wait for theirs. */
const MAX_WRITE_BEHIND = 256;

/**
 * Failures a retry may change: an unavailable service, a timeout, a rate limit, an internal fault.
 * A refusal (a missing approval, a refused budget, a bad input) stays one.
 */
const RETRIED_CODES = new Set(['unavailable', 'internal', 'rate_limited']);
