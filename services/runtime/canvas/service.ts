import { randomBytes, randomUUID } from 'node:crypto';
import { type CanvasNodeV2, extensionPoints, SigilError } from '@sigil/plugin-api';
import { PORT_VALUE_SCHEMAS } from '@sigil/plugin-api/canvas';
import type { AuthPrincipal } from '../../../core/auth/index.ts';
import type { Logger } from '../../../core/log.ts';
import { publicBase } from '../../../core/auth/settings.ts';
import type { Kernel } from '../../kernel.ts';
import type { Agents } from '../agents.ts';
import type { ChatService } from '../chat/chat.ts';
import type { GatewayClient } from '../gateway-client.ts';
import type { Holds } from '../ledger/holds.ts';
import type { ProviderVault } from '../vault/index.ts';
import { RunArtifacts } from './artifacts.ts';
import type { WorkflowDocument } from './document.ts';
import { RunEvents } from './events.ts';
import type { ActiveRun } from './active-run.ts';
import { CanvasExecutor } from './executor.ts';
import { CanvasHostServices } from './host-services.ts';
import { RunStore, type RunRecord } from './runs.ts';
import { validateWorkflow, type ValidatedWorkflow } from './validate.ts';
import { Workflows } from './workflows.ts';
import { Workspaces } from './workspaces.ts';

export interface CanvasDeps {
  kernel: Kernel;
  chat: ChatService;
  agents: Agents;
  holds: Holds;
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

/** Canvas workflows: documents, their validation, runs and what they stream (docs/canvas.md). */
export class CanvasService {
  readonly settings: Kernel['config']['runtime']['canvas'];
  readonly workflows: Workflows;
  readonly runs: RunStore;
  readonly events = new RunEvents();
  readonly artifacts: RunArtifacts;
  readonly workspaces: Workspaces;
  readonly executor: CanvasExecutor;
  private readonly host: CanvasHostServices;
  private readonly logger: Logger;

  constructor(private readonly deps: CanvasDeps) {
    const { kernel } = deps;
    this.logger = kernel.logger.child({ component: 'canvas' });
    this.settings = kernel.config.runtime.canvas;
    this.workflows = new Workflows(kernel.db, kernel.clock, this.settings.maxWorkflowsPerWallet);
    const scrub = (text: string) => kernel.secrets.scrub(text);
    this.runs = new RunStore(kernel.db, kernel.clock, scrub, (runId, events) =>
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
      artifacts: this.artifacts,
      workspaces: this.workspaces,
      settings: this.settings,
      services: (run, nodeId, attempt) => this.host.for(run, nodeId, attempt),
      logger: this.logger,
      scrub,
      now: () => kernel.clock.now(),
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
   * Starts a run of a document or a saved workflow for the signed-in wallet, charged to its agent:
   * everything that can refuse it does so before anything is stored (a 4xx that changes nothing).
   */
  async execute(principal: AuthPrincipal, request: ExecuteRequest): Promise<ActiveRun> {
    const wallet = principal.address;
    await this.deps.agents.get(wallet, request.agentId);
    const saved = request.workflowId
      ? await this.workflows.get(wallet, request.workflowId, request.version)
      : undefined;
    const plan = this.validate(saved ? saved.document : request.workflow);
    checkInputs(plan.document, request.inputs);
    if ((await this.runs.activeCount(wallet)) >= this.settings.maxActiveRuns)
      throw new SigilError(
        'rate_limited',
        `At most ${this.settings.maxActiveRuns} runs of a wallet at once`,
        {
          hint: 'Wait for a run to end, or cancel one',
          details: { reason: 'too_many_active_runs', limit: this.settings.maxActiveRuns },
        },
      );
    const record: Omit<RunRecord, 'status' | 'error' | 'createdAt' | 'updatedAt' | 'endedAt'> = {
      id: randomUUID(),
      wallet,
      agentId: request.agentId,
      workflowId: saved?.id ?? null,
      workflowVersion: saved?.version ?? null,
      document: plan.document,
      inputs: request.inputs,
      previewToken: randomBytes(24).toString('base64url'),
    };
    await this.runs.create(record, plan.order, [
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
    ]);
    const stored = await this.runs.get(wallet, record.id);
    const run = this.executor.start(stored, plan, principal);
    void run.ended.then(() => this.host.endRun(record.id));
    return run;
  }

  /** The node kinds loaded plugins provide. */
  nodeKinds(): ReadonlyMap<string, CanvasNodeV2> {
    return this.deps.kernel.plugins.extensions(extensionPoints.canvasNodeKinds);
  }

  /** The wallet's run this process executes; 404 for another's, 409 once it has ended. */
  async activeRun(principal: AuthPrincipal, runId: string): Promise<ActiveRun> {
    const active = this.executor.get(runId);
    // No read for the owner's run in flight: a decision goes on without waiting for the store.
    if (active?.record.wallet === principal.address) return active;
    const record = await this.runs.get(principal.address, runId);
    const run = this.executor.get(runId);
    if (!run)
      throw new SigilError('conflict', `Run ${runId} has ended (${record.status})`, {
        details: { reason: 'run_ended', status: record.status },
      });
    return run;
  }

  /** The value an approval node waits on (what its owner approves); 404 for a node the run lacks. */
  approvalValue(run: ActiveRun, nodeId: string): unknown {
    if (!run.plan.nodes.has(nodeId))
      throw new SigilError('not_found', `Run ${run.record.id} has no node ${nodeId}`, {
        details: { reason: 'node_not_found', nodeId },
      });
    this.executor.requireWaiting(run, nodeId);
    return this.executor.inputsOf(run, nodeId).value;
  }

  async cancel(principal: AuthPrincipal, runId: string): Promise<void> {
    const run = await this.activeRun(principal, runId);
    await this.executor.cancel(run);
  }

  /**
   * Picks up every run a previous process left unfinished, and says in one log line how many wait for
   * an approval, how many go on, and how many cannot (nothing when there were none).
   */
  async start(): Promise<void> {
    const taken = { waiting: 0, resumed: 0, failed: 0 };
    const unfinished = await this.runs.unfinished();
    for (const record of unfinished) {
      await this.runs.track(record.id);
      let plan: ValidatedWorkflow;
      try {
        plan = this.validate(record.document);
      } catch (err) {
        // The node kinds it used are no longer loaded: the run cannot go on.
        await this.runs.changeRun(
          record.id,
          'failed',
          [{ type: 'run.ended', data: { status: 'failed', reason: 'workflow_invalid' } }],
          {
            code: 'conflict',
            reason: 'workflow_invalid',
            message: `The run's workflow is no longer valid here: ${(err as Error).message}`,
          },
        );
        taken.failed++;
        continue;
      }
      const nodes = await this.runs.nodes(record.id);
      const run = await this.executor.resume(record, plan, nodes, await this.runs.charged(record.id));
      void run.ended.then(() => this.host.endRun(record.id));
      if (record.status === 'waiting_approval') taken.waiting++;
      else taken.resumed++;
    }
    if (unfinished.length > 0) this.logger.info(taken, startedLine(taken));
  }

  /**
   * Shutdown begins: open event streams end at once with a `shutdown` event (runs are stored, and
   * their clients take them up again after the restart with Last-Event-ID).
   */
  closing(): void {
    this.events.shutdown();
  }

  async close(): Promise<void> {
    this.closing();
    await this.executor.stop();
  }
}

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
