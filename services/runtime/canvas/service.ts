import { randomBytes, randomUUID } from 'node:crypto';
import { type CanvasApprovalV2, type CanvasNodeV2, extensionPoints, SigilError } from '@sigil/plugin-api';
import { PORT_VALUE_SCHEMAS } from '@sigil/plugin-api/canvas';
import type { AuthPrincipal } from '../../../core/auth/index.ts';
import type { Replica } from '../../../core/db/replicas.ts';
import type { SseStream } from '../../../core/http/sse.ts';
import type { Logger } from '../../../core/log.ts';
import { PeriodicPass } from '../../../core/periodic.ts';
import { publicBase } from '../../../core/auth/settings.ts';
import type { Kernel } from '../../kernel.ts';
import type { Agents } from '../agents.ts';
import type { ChatService } from '../chat/chat.ts';
import type { GatewayClient } from '../gateway-client.ts';
import type { Holds } from '../ledger/holds.ts';
import type { Ledger } from '../ledger/ledger.ts';
import type { ProviderVault } from '../vault/index.ts';
import { RunArtifacts } from './artifacts.ts';
import { checkedDecision, type DecisionInput } from './approvals.ts';
import { RunClaims } from './claims.ts';
import type { WorkflowDocument } from './document.ts';
import { RunEvents } from './events.ts';
import { ActiveRun } from './active-run.ts';
import { CanvasExecutor } from './executor.ts';
import { CanvasHostServices } from './host-services.ts';
import { ENDED_RUN, type InTransaction, type NewRun, RunStore, type RunStatus } from './runs.ts';
import { validateWorkflow, type ValidatedWorkflow } from './validate.ts';
import { Workflows } from './workflows.ts';
import { Workspaces } from './workspaces.ts';

export interface CanvasDeps {
  kernel: Kernel;
  chat: ChatService;
  agents: Agents;
  holds: Holds;
  /** Its wallet's lock (Ledger.withWallet), under which the wallet's limits are counted and taken. */
  ledger: Pick<Ledger, 'withWallet'>;
  vault: ProviderVault;
  gateway: GatewayClient;
}

export interface ExecuteRequest {
  workflow?: unknown;
  workflowId?: string | undefined;
  version?: number | undefined;
  agentId: string;
  inputs: Record<string, unknown>;
}

/**
 * Canvas workflows: documents, their validation, runs and what they stream (docs/canvas.md). Each
 * unended run is executed by one replica, which claims it (RunClaims); a replica takes over the runs
 * of replicas that died or stopped, at start and every `database.leaseSeconds`, and carries out what
 * was asked of its runs through another (a cancellation, a decision) every `replicaPollMs`.
 */
export class CanvasService {
  readonly settings: Kernel['config']['runtime']['canvas'];
  readonly workflows: Workflows;
  readonly claims: RunClaims;
  readonly runs: RunStore;
  readonly events: RunEvents;
  readonly artifacts: RunArtifacts;
  readonly workspaces: Workspaces;
  readonly executor: CanvasExecutor;
  private readonly host: CanvasHostServices;
  private readonly logger: Logger;
  private readonly replica: Replica;
  private readonly takeOver: PeriodicPass<number>;
  private readonly requests: PeriodicPass<void>;

  constructor(private readonly deps: CanvasDeps) {
    const { kernel } = deps;
    this.logger = kernel.logger.child({ component: 'canvas' });
    this.settings = kernel.config.runtime.canvas;
    this.replica = kernel.replica;
    this.workflows = new Workflows(kernel.db, kernel.clock, deps.ledger, this.settings.maxWorkflowsPerWallet);
    const scrub = (text: string) => kernel.secrets.scrub(text);
    const leaseMs = kernel.config.database.leaseSeconds * 1000;
    this.claims = new RunClaims(kernel.db, kernel.replica, leaseMs);
    this.events = new RunEvents(
      this.settings.replicaPollMs,
      (runId) => this.executor.get(runId) !== undefined,
    );
    this.runs = new RunStore(kernel.db, kernel.clock, scrub, this.claims, (runId, events) =>
      this.events.publish(runId, events),
    );
    this.artifacts = new RunArtifacts(kernel.db, kernel.clock, this.settings.maxArtifactBytes);
    this.workspaces = new Workspaces(this.settings.dataDir, publicBase(kernel.config.runtime));
    this.host = new CanvasHostServices({
      chat: deps.chat,
      agents: deps.agents,
      holds: deps.holds,
      vault: deps.vault,
      gateway: deps.gateway,
      secrets: kernel.secrets,
      onCost: (run, nodeId, cost) => this.executor.emit(run, [{ type: 'cost', data: { nodeId, ...cost } }]),
    });
    this.executor = new CanvasExecutor({
      store: this.runs,
      claims: this.claims,
      relinquished: (runId) => this.events.changedHands(runId),
      artifacts: this.artifacts,
      workspaces: this.workspaces,
      settings: this.settings,
      services: (run, nodeId, attempt) => this.host.for(run, nodeId, attempt),
      logger: this.logger,
      scrub,
      now: () => kernel.clock.now(),
    });
    this.takeOver = new PeriodicPass({
      pass: () => this.takeOverFree(),
      intervalMs: leaseMs,
      logger: this.logger,
      failure: 'canvas: taking over the runs of stopped replicas failed; trying again',
    });
    this.requests = new PeriodicPass({
      pass: () => this.carryOutAsked(),
      intervalMs: this.settings.replicaPollMs,
      logger: this.logger,
      failure: 'canvas: reading what was asked of this replica’s runs failed; trying again',
    });
  }

  /** Checks a document against the loaded node kinds and the runtime's limits. */
  validate(document: unknown): ValidatedWorkflow {
    const bytes = Buffer.byteLength(JSON.stringify(document ?? null));
    if (bytes > this.settings.maxDocumentBytes)
      throw new SigilError(
        'payload_too_large',
        `The workflow is ${bytes} bytes; at most ${this.settings.maxDocumentBytes}`,
        {
          details: { reason: 'workflow_too_large', limit: this.settings.maxDocumentBytes },
        },
      );
    return validateWorkflow(document, {
      nodeKinds: this.nodeKinds(),
      teamMode: this.settings.teamMode,
      maxNodes: this.settings.maxNodes,
      maxRetries: this.settings.maxRetries,
    });
  }

  /**
   * Streams a run's events to `sse` (RunEvents.stream). The stream runs on after its HTTP handler
   * returned, where nothing would catch its failure (the store unreachable): it is logged here, and the
   * stream ends, for the client to resume from its last event.
   */
  async streamEvents(runId: string, afterSeq: number, sse: SseStream, hasEnded: boolean): Promise<void> {
    await this.events
      .stream(this.runs, runId, afterSeq, sse, hasEnded)
      .catch((err: unknown) =>
        this.logger.warn({ err, runId }, 'canvas: a run’s event stream failed; the client resumes it'),
      );
  }

  /**
   * Starts a run of a document or a saved workflow for the signed-in wallet, charged to its agent:
   * everything that can refuse it does so before anything is stored (a 4xx that changes nothing).
   * Its wallet's active runs are counted in the transaction that stores it, under the wallet's lock,
   * so requests racing, on one replica or several, never pass `maxActiveRuns` together.
   */
  async execute(principal: AuthPrincipal, request: ExecuteRequest): Promise<ActiveRun> {
    const wallet = principal.address;
    await this.deps.agents.get(wallet, request.agentId);
    const saved = request.workflowId
      ? await this.workflows.get(wallet, request.workflowId, request.version)
      : undefined;
    const plan = this.validate(saved ? saved.document : request.workflow);
    checkInputs(plan.document, request.inputs);
    const record: NewRun = {
      id: randomUUID(),
      wallet,
      agentId: request.agentId,
      workflowId: saved?.id ?? null,
      workflowVersion: saved?.version ?? null,
      document: plan.document,
      inputs: request.inputs,
      previewToken: randomBytes(24).toString('base64url'),
    };
    const underLimit: InTransaction = (work) =>
      this.deps.ledger.withWallet(wallet, async (trx) => {
        if ((await this.runs.activeCount(trx, wallet)) >= this.settings.maxActiveRuns)
          throw new SigilError(
            'rate_limited',
            `At most ${this.settings.maxActiveRuns} runs of a wallet at once`,
            {
              hint: 'Wait for a run to end, or cancel one',
              details: { reason: 'too_many_active_runs', limit: this.settings.maxActiveRuns },
            },
          );
        return work(trx);
      });
    const claim = await this.runs.create(
      record,
      plan.order,
      [
        {
          type: 'run.started',
          data: {
            runId: record.id,
            workflow: { name: plan.document.name, id: record.workflowId, version: record.workflowVersion },
            agentId: record.agentId,
            previewUrl: this.workspaces.previewUrlOf(record.previewToken),
            nodes: plan.order.map((id) => ({ id, kind: plan.nodes.get(id)?.spec.kind })),
          },
        },
      ],
      underLimit,
    );
    const stored = await this.runs.get(wallet, record.id);
    const run = this.executor.start(stored, plan, principal, claim);
    void run.ended.then(() => this.host.endRun(record.id));
    return run;
  }

  /** The node kinds loaded plugins provide. */
  nodeKinds(): ReadonlyMap<string, CanvasNodeV2> {
    return this.deps.kernel.plugins.extensions(extensionPoints.canvasNodeKinds);
  }

  /**
   * The wallet's unended run as this process knows it: the one it executes, or else as stored (what
   * another replica executes). 404 for another wallet's, 409 once it has ended.
   */
  private async unendedRun(principal: AuthPrincipal, runId: string): Promise<ActiveRun> {
    const active = this.executor.get(runId);
    // The run executed here: its state in memory is the newest.
    if (active?.record.wallet === principal.address) return active;
    const record = await this.runs.get(principal.address, runId);
    if (ENDED_RUN.includes(record.status)) throw runEnded(runId, record.status);
    return ActiveRun.fromStored(
      record,
      this.validate(record.document),
      await this.runs.nodes(runId),
      'running',
    );
  }

  /** The value an approval node waits on (what its owner approves); 404 for a node the run lacks. */
  private approvalValue(run: ActiveRun, nodeId: string): unknown {
    if (!run.plan.nodes.has(nodeId))
      throw new SigilError('not_found', `Run ${run.record.id} has no node ${nodeId}`, {
        details: { reason: 'node_not_found', nodeId },
      });
    this.executor.requireWaiting(run, nodeId);
    return this.executor.inputsOf(run, nodeId).value;
  }

  /**
   * The owner's decision on a waiting approval node, through any replica: checked, stored (one
   * decision per node, whichever replicas they reach), then carried out by the run's replica: at once
   * when it is this one, else within `replicaPollMs`.
   */
  async decide(
    principal: AuthPrincipal,
    runId: string,
    nodeId: string,
    input: DecisionInput,
  ): Promise<CanvasApprovalV2> {
    const run = await this.unendedRun(principal, runId);
    const decision = await checkedDecision(
      principal.address,
      runId,
      nodeId,
      this.approvalValue(run, nodeId),
      input,
      { requireSignature: this.settings.requireSignedApprovals, now: new Date() },
    );
    if (!(await this.runs.storeDecision(runId, nodeId, { ...decision })))
      throw new SigilError('conflict', `Node ${nodeId} is not waiting for an approval`, {
        details: { reason: 'not_waiting_approval', nodeId },
      });
    const executing = this.executor.get(runId);
    if (executing) {
      executing.principal = principal;
      await this.executor.applyDecision(executing, nodeId, decision);
    }
    return decision;
  }

  /**
   * Cancels the wallet's run through any replica: asked in the store, then carried out by the run's
   * replica, at once when it is this one, else within `replicaPollMs`. 409 once the run has ended.
   */
  async cancel(principal: AuthPrincipal, runId: string): Promise<void> {
    const reason = 'cancelled_by_owner';
    await this.runs.get(principal.address, runId);
    if (!(await this.runs.requestCancel(runId, reason)))
      throw runEnded(runId, (await this.runs.get(principal.address, runId)).status);
    const run = this.executor.get(runId);
    if (run) await this.executor.cancel(run, reason);
  }

  /**
   * Takes over the free runs now (what a previous process left), then every `database.leaseSeconds`,
   * and looks for what other replicas were asked of this one's runs every `replicaPollMs`.
   */
  async start(): Promise<void> {
    await this.takeOver.run();
    this.takeOver.start();
    this.requests.start();
  }

  /** A pass taking over the free runs now (or the pass under way): how many it took. */
  takeOverFreeRuns(): Promise<number> {
    return this.takeOver.run();
  }

  /** A pass carrying out what was asked of this replica's runs now (or the pass under way). */
  carryOutRequests(): Promise<void> {
    return this.requests.run();
  }

  /**
   * Takes over every run free to take (its replica stopped or died, or its claim ran out; never a
   * live replica's) and goes on with it, and says in one log line how many wait for an approval, how
   * many go on, and how many cannot (nothing when it took none). Answers how many it took.
   */
  private async takeOverFree(): Promise<number> {
    const taken = { waiting: 0, resumed: 0, failed: 0 };
    for (const runId of await this.claims.free(this.executor.executing())) {
      const claim = await this.claims.take(runId);
      // Another replica took it first.
      if (claim === undefined) continue;
      const record = await this.runs.byId(runId);
      await this.runs.track(runId, claim);
      let plan: ValidatedWorkflow;
      try {
        plan = this.validate(record.document);
      } catch (err) {
        // The node kinds it used are no longer loaded: the run cannot go on.
        await this.runs.changeRun(
          runId,
          'failed',
          [{ type: 'run.ended', data: { status: 'failed', reason: 'workflow_invalid' } }],
          {
            code: 'conflict',
            reason: 'workflow_invalid',
            message: `The run's workflow is no longer valid here: ${(err as Error).message}`,
          },
        );
        this.runs.release(runId);
        taken.failed++;
        continue;
      }
      const nodes = await this.runs.nodes(runId);
      const run = await this.executor.resume(record, plan, nodes, await this.runs.charged(runId), claim);
      void run.ended.then(() => this.host.endRun(runId));
      if (record.cancelRequested) await this.executor.cancel(run, record.cancelRequested);
      if (record.status === 'waiting_approval') taken.waiting++;
      else taken.resumed++;
    }
    const total = taken.waiting + taken.resumed + taken.failed;
    if (total > 0) this.logger.info(taken, startedLine(taken));
    return total;
  }

  /** Carries out the cancellations and decisions asked through other replicas of the runs executed here. */
  private async carryOutAsked(): Promise<void> {
    if (this.executor.executing().size === 0) return;
    const { cancels, decisions } = await this.runs.requests(this.replica.id);
    for (const { runId, reason } of cancels) {
      const run = this.executor.get(runId);
      if (run) await this.executor.cancel(run, reason);
    }
    for (const { runId, nodeId, decision } of decisions) {
      const run = this.executor.get(runId);
      if (run) await this.executor.applyDecision(run, nodeId, decision as unknown as CanvasApprovalV2);
    }
  }

  /**
   * Shutdown begins: open event streams end at once with a `shutdown` event (runs are stored, and
   * their clients take them up again after the restart with Last-Event-ID).
   */
  closing(): void {
    this.events.shutdown();
  }

  async close(): Promise<void> {
    await this.takeOver.stop();
    await this.requests.stop();
    this.closing();
    await this.executor.stop();
  }
}

const runEnded = (runId: string, status: RunStatus): SigilError =>
  new SigilError('conflict', `Run ${runId} has ended (${status})`, {
    details: { reason: 'run_ended', status },
  });

/** `canvas: 1 run waiting for approval, 0 resumed` (and `, 1 failed: its workflow is no longer valid`). */
function startedLine(taken: { waiting: number; resumed: number; failed: number }): string {
  const runs = (n: number) => `${n} run${n === 1 ? '' : 's'}`;
  const failed = taken.failed > 0 ? `, ${taken.failed} failed: the workflow is no longer valid here` : '';
  return `canvas: ${runs(taken.waiting)} waiting for approval, ${taken.resumed} resumed${failed}`;
}

/** The run's inputs against the document's: each required one given, each of its type, no other. */
function checkInputs(document: WorkflowDocument, inputs: Record<string, unknown>): void {
  const problems: { path: string; message: string }[] = [];
  for (const [name, declared] of Object.entries(document.inputs)) {
    const value = inputs[name];
    if (value === undefined) {
      if (declared.required)
        problems.push({ path: `inputs.${name}`, message: `required (${declared.type})` });
    } else if (!PORT_VALUE_SCHEMAS[declared.type].safeParse(value).success)
      problems.push({ path: `inputs.${name}`, message: `must be ${declared.type}` });
  }
  for (const name of Object.keys(inputs))
    if (!(name in document.inputs))
      problems.push({ path: `inputs.${name}`, message: 'the workflow declares no such input' });
  if (problems.length > 0)
    throw new SigilError(
      'invalid_request',
      `The run's inputs are not valid: ${problems[0]?.path}: ${problems[0]?.message}`,
      {
        details: { reason: 'inputs_invalid', problems },
      },
    );
}
