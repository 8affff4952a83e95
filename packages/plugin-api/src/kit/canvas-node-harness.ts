import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { z } from 'zod';
import { initWorkspace, runGit } from '../canvas/git.ts';
import { PORT_VALUE_SCHEMAS } from '../canvas/ports.ts';
import { isSigilError, SigilError } from '../errors.ts';
import { Redactor } from '../redaction.ts';
import type {
  CanvasApprovalV2,
  CanvasFileV2,
  CanvasNodeExampleV2,
  CanvasNodeV2,
  CanvasServicesV2,
} from '../index.ts';
import { approvedDecision, canvasTestContext, type CanvasTestRecord } from './canvas-node-context.ts';
import { expectShape, failWith, notApplicableBecause } from './check.ts';
import type { KitContext } from './kit.ts';
import { isSecretName } from './redact.ts';
import { workspaceState, type WorkspaceState } from './canvas-workspace-state.ts';

/**
 * How the canvas-node kit runs a node: in a workspace of its own (a fresh git repository in a folder
 * of its own), with its example, the approvals its effect needs, and host services that give a canary
 * for every secret and refuse everything else (a model turn, a gateway tool) as `unavailable`.
 */

export type CanvasNodeContext = KitContext & { instance: CanvasNodeV2 };

/** The id the node runs under, and that of the approval node upstream of a `writes` node. */
export const KIT_NODE_ID = 'kit-node';
export const KIT_APPROVAL_ID = 'kit-approval';

const exampleSchema = z.object({
  params: z.record(z.string(), z.unknown()),
  inputs: z.record(z.string(), z.unknown()),
  workspaceFiles: PORT_VALUE_SCHEMAS.files.optional(),
});

export const exampleOf = (instance: CanvasNodeV2): CanvasNodeExampleV2 =>
  expectShape(exampleSchema, instance.example, 'example') as CanvasNodeExampleV2;

/** The example's params as the node's `params` parses them (what the executor passes `run` and `ports`). */
export function exampleParams(instance: CanvasNodeV2): Record<string, unknown> {
  const parsed = instance.params.safeParse(exampleOf(instance).params);
  if (!parsed.success)
    failWith(
      `params refuses example.params: ${parsed.error.issues.map((issue) => issue.message).join('; ')}`,
    );
  return parsed.data;
}

/** What the executor gives the node's run of its example: an approved decision upstream of a `writes` node, an approval node's own. */
export function approvalsFor(instance: CanvasNodeV2): CanvasApprovalV2[] {
  if (instance.effect === 'writes') return [approvedDecision(KIT_APPROVAL_ID)];
  if (instance.effect === 'approval') return [approvedDecision(KIT_NODE_ID)];
  return [];
}

export const rejectedDecision = (): CanvasApprovalV2 => ({
  ...approvedDecision(KIT_APPROVAL_ID),
  approved: false,
  comment: 'rejected by the canvas-node kit',
});

export interface NodeRunOptions {
  approvals?: readonly CanvasApprovalV2[];
  signal?: AbortSignal;
}

export interface NodeRun {
  outcome: { outputs: Record<string, unknown> } | { error: unknown };
  /** The rejection as a reason may quote it, every secret the node was given redacted. */
  rejection: string | undefined;
  logs: CanvasTestRecord['logs'];
  artifacts: number;
  /**
   * The run rejected with the very error a service the kit does not provide threw (a model turn, a
   * gateway tool): the example needs the host, and what needs a successful run does not apply. Only
   * that object counts, so a node cannot claim it by throwing an `unavailable` of its own.
   */
  needsHostService: boolean;
}

export interface NodeHarness {
  /** The example's params, parsed. */
  params: Record<string, unknown>;
  /**
   * Whether the node was given a secret: it asked for one (the kit answers a canary), or a param of
   * the example is named as one (`apiKey`, `token`…).
   */
  hasSecrets(): boolean;
  /** Whether `text` holds a secret the node was given, in any encoding. */
  holdsSecret(text: string): boolean;
  /** The workspace and the folder around it, as they are now. */
  state(): Promise<WorkspaceState>;
  /** Runs the example once more, in the same workspace and with the same idempotency key. */
  run(options?: NodeRunOptions): Promise<NodeRun>;
}

/**
 * Services of the host as the kit plays it: a canary for any secret; llm, callTool and listTools
 * refuse with an `unavailable` the kit remembers (after the signal's reason, as the host's would).
 */
function kitServices(canary: string) {
  const refusals = new WeakSet<object>();
  let secretsGiven = 0;
  const refuse = (name: string) => async (_request: unknown, signal: AbortSignal) => {
    signal.throwIfAborted();
    const refusal = new SigilError('unavailable', `the canvas-node kit provides no ${name} service`, {
      details: { reason: 'kit_service_unavailable' },
    });
    refusals.add(refusal);
    throw refusal;
  };
  const services: CanvasServicesV2 = {
    llm: refuse('llm'),
    callTool: refuse('callTool'),
    listTools: refuse('listTools'),
    secret: async () => {
      secretsGiven += 1;
      return canary;
    },
  };
  return {
    services,
    secretsGiven: () => secretsGiven,
    isRefusal: (error: unknown) => typeof error === 'object' && error !== null && refusals.has(error),
  };
}

/** Gives `body` a harness around a fresh workspace, removed afterwards. */
export async function withNodeHarness<T>(
  { instance, evidence }: CanvasNodeContext,
  body: (harness: NodeHarness) => Promise<T>,
): Promise<T> {
  const params = exampleParams(instance);
  const { inputs } = exampleOf(instance);
  const root = await mkdtemp(join(tmpdir(), 'sigil-canvas-kit-'));
  const dir = join(root, 'workspace');
  const canary = `sigil-kit-canary-${randomBytes(16).toString('hex')}`;
  const { services, secretsGiven, isRefusal } = kitServices(canary);
  const secretParams = secretParamsOf(exampleOf(instance).params);
  const secrets = Redactor.of([canary, ...secretParams]);
  const redacted = (value: unknown): unknown => JSON.parse(secrets.text(JSON.stringify(value) ?? 'null'));
  const runId = randomUUID();
  try {
    await initWorkspace(dir);
    await seedWorkspace(dir, exampleOf(instance).workspaceFiles ?? []);
    return await body({
      params,
      hasSecrets: () => secretsGiven() > 0 || secretParams.length > 0,
      holdsSecret: (text) => secrets.text(text) !== text,
      state: () => workspaceState(root, dir),
      run: async (options = {}) => {
        const approvals = options.approvals ?? approvalsFor(instance);
        const { context, record, dispose } = await canvasTestContext({
          params,
          inputs,
          approvals,
          services,
          workspaceDir: dir,
          runId,
          nodeId: KIT_NODE_ID,
          servePreview: true,
          ...(options.signal ? { signal: options.signal } : {}),
        });
        const outcome = await instance
          .run(context)
          .then(
            (outputs) => ({ outputs }),
            (error: unknown) => ({ error }),
          )
          .finally(dispose);
        const rejection = 'error' in outcome ? secrets.text(describeError(outcome.error)) : undefined;
        evidence.note(`run(example) with ${approvals.length} decision(s)`, {
          ...('error' in outcome ? { error: rejection } : { outputs: redacted(outcome.outputs) }),
          logs: redacted(record.logs),
        });
        return {
          outcome,
          rejection,
          logs: record.logs,
          artifacts: record.artifacts.length,
          needsHostService: 'error' in outcome && isRefusal(outcome.error),
        };
      },
    });
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

/** Writes and commits the example's workspace files, so the run starts from them. */
async function seedWorkspace(dir: string, files: readonly CanvasFileV2[]): Promise<void> {
  if (files.length === 0) return;
  for (const file of files) {
    await mkdir(dirname(join(dir, file.path)), { recursive: true });
    await writeFile(join(dir, file.path), file.content);
  }
  await runGit(dir, ['add', '--all']);
  await runGit(dir, ['commit', '--quiet', '-m', 'the example workspace']);
}

/** The strings of the secret-named params (`apiKey`, `token`…) among `params`, however deep. */
function secretParamsOf(params: unknown): string[] {
  if (typeof params !== 'object' || params === null) return [];
  return Object.entries(params).flatMap(([key, value]) =>
    isSecretName(key) && typeof value === 'string' && value.length > 0 ? [value] : secretParamsOf(value),
  );
}

/** An error as a reason reads it: a SigilError's code and reason, then its message. */
export function describeError(error: unknown): string {
  if (isSigilError(error)) {
    const reason = error.details?.reason;
    return `SigilError ${error.code}${typeof reason === 'string' ? ` (${reason})` : ''}: ${error.message}`;
  }
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/**
 * The run's outputs; the check does not apply when the run needed a service only the host has, and
 * fails when the run rejected for a reason of the node's own.
 */
export function outputsOf(run: NodeRun, what: string): Record<string, unknown> {
  if (run.needsHostService)
    notApplicableBecause(`${what} needs a service of the host the kit does not provide (${run.rejection})`);
  if ('error' in run.outcome) failWith(`${what} rejected: ${run.rejection}`);
  return run.outcome.outputs;
}
