import Router from '@koa/router';
import { z } from 'zod';
import { requireAuth, type AuthPrincipal } from '../../../core/auth/index.ts';
import { openSse } from '../../../core/http/sse.ts';
import { parseInput } from '../../../core/http/validate.ts';
import { workflowJsonSchema } from './document.ts';
import { ENDED_RUN, type RunRecord } from './runs.ts';
import type { CanvasService } from './service.ts';
import type { SavedWorkflow } from './workflows.ts';
import { previewRouter } from './preview.ts';

const uuid = (what: string) => z.uuid(`must be ${what} (a UUID)`);
export const runParams = z.object({ id: uuid('a run id') });
export const workflowParams = z.object({ id: uuid('a workflow id') });
export const nodeParams = z.object({
  id: uuid('a run id'),
  nodeId: z.string().regex(/^[A-Za-z][A-Za-z0-9_-]{0,62}$/),
});
export const artifactParams = z.object({ id: uuid('a run id'), artifactId: uuid('an artifact id') });

export const executeBody = z
  .object({
    workflow: z.unknown().optional(),
    workflowId: uuid('a workflow id').optional(),
    version: z.number().int().min(1).optional(),
    agentId: uuid('an agent id'),
    inputs: z.record(z.string(), z.unknown()).default({}),
  })
  .strict()
  .refine((body) => (body.workflow === undefined) !== (body.workflowId === undefined), {
    message: 'give either workflow (a document) or workflowId (a saved workflow)',
  });
export const saveBody = z
  .object({ workflow: z.unknown(), expectedVersion: z.number().int().min(1).optional() })
  .strict();
export const decisionBody = z
  .object({
    approved: z.boolean(),
    comment: z.string().max(2000).optional(),
    valueHash: z
      .string()
      .regex(/^[0-9a-f]{64}$/, 'SHA-256 hex')
      .optional(),
    signature: z
      .string()
      .regex(/^0x[0-9a-fA-F]+$/, 'a 0x-hex signature')
      .optional(),
  })
  .strict();
export const listQuery = z.object({
  limit: z.coerce.number().int().min(1).max(200).default(50),
  before: z.iso.datetime().optional(),
});
export const versionQuery = z.object({ version: z.coerce.number().int().min(1).optional() });
const lastEventId = z.coerce.number().int().min(0).default(0);

const principalOf = (state: { auth?: AuthPrincipal }) => state.auth as AuthPrincipal;

const runView = (run: RunRecord) => ({
  id: run.id,
  status: run.status,
  agentId: run.agentId,
  workflow: { name: run.document.name, id: run.workflowId, version: run.workflowVersion },
  error: run.error,
  createdAt: run.createdAt.toISOString(),
  updatedAt: run.updatedAt.toISOString(),
  endedAt: run.endedAt?.toISOString() ?? null,
});

/** What saving a workflow answers: the version saved, without its document. */
const savedView = (saved: SavedWorkflow) => ({
  id: saved.id,
  version: saved.version,
  name: saved.name,
  createdAt: saved.createdAt.toISOString(),
});

/** `/canvas/…`: workflows, runs, their event streams, approvals and artifacts, all owner-only. */
export function canvasRouter(canvas: CanvasService): Router {
  const router = new Router({ prefix: '/canvas' });
  router.get('/schema.json', (ctx) => {
    ctx.body = workflowJsonSchema();
  });
  router.use(previewRouter(canvas).routes());
  router.use(requireAuth());

  router.get('/node-kinds', (ctx) => {
    const kinds = canvas.nodeKinds();
    ctx.body = {
      teamMode: canvas.settings.teamMode,
      nodeKinds: [...kinds].map(([kind, node]) => ({
        kind,
        description: node.description,
        effect: node.effect,
        teamMode: node.teamMode === true,
        params: z.toJSONSchema(node.params, { io: 'input', unrepresentable: 'any' }),
        example: node.example,
        ports: node.ports(node.params.parse(node.example.params)),
      })),
    };
  });

  router.post('/workflows/validate', (ctx) => {
    const plan = canvas.validate((ctx.request.body as { workflow?: unknown } | undefined)?.workflow);
    ctx.body = { valid: true, order: plan.order };
  });
  router.post('/workflows', async (ctx) => {
    const body = parseInput(saveBody, ctx.request.body ?? {}, 'body');
    const saved = await canvas.workflows.create(
      principalOf(ctx.state).address,
      canvas.validate(body.workflow).document,
    );
    ctx.status = 201;
    ctx.body = savedView(saved);
  });
  router.get('/workflows', async (ctx) => {
    const workflows = await canvas.workflows.list(principalOf(ctx.state).address);
    ctx.body = { workflows: workflows.map((w) => ({ ...w, createdAt: w.createdAt.toISOString() })) };
  });
  router.get('/workflows/:id', async (ctx) => {
    const { id } = parseInput(workflowParams, ctx.params, 'params');
    const { version } = parseInput(versionQuery, ctx.query, 'query');
    const saved = await canvas.workflows.get(principalOf(ctx.state).address, id, version);
    ctx.body = { ...saved, createdAt: saved.createdAt.toISOString() };
  });
  router.get('/workflows/:id/versions', async (ctx) => {
    const { id } = parseInput(workflowParams, ctx.params, 'params');
    const versions = await canvas.workflows.versions(principalOf(ctx.state).address, id);
    ctx.body = { versions: versions.map((v) => ({ ...v, createdAt: v.createdAt.toISOString() })) };
  });
  router.put('/workflows/:id', async (ctx) => {
    const { id } = parseInput(workflowParams, ctx.params, 'params');
    const body = parseInput(saveBody, ctx.request.body ?? {}, 'body');
    const wallet = principalOf(ctx.state).address;
    await canvas.workflows.get(wallet, id);
    const saved = await canvas.workflows.update(
      wallet,
      id,
      canvas.validate(body.workflow).document,
      body.expectedVersion,
    );
    ctx.body = savedView(saved);
  });
  router.delete('/workflows/:id', async (ctx) => {
    const { id } = parseInput(workflowParams, ctx.params, 'params');
    await canvas.workflows.remove(principalOf(ctx.state).address, id);
    ctx.status = 204;
  });

  router.post('/workflows/execute/stream', async (ctx) => {
    const body = parseInput(executeBody, ctx.request.body ?? {}, 'body');
    const run = await canvas.execute(principalOf(ctx.state), body);
    const sse = openSse(ctx);
    // The run goes on when the client leaves: it resumes with GET /canvas/runs/:id/events.
    void canvas.streamEvents(run.record.id, 0, sse, false);
  });

  router.get('/runs', async (ctx) => {
    const { limit, before } = parseInput(listQuery, ctx.query, 'query');
    const runs = await canvas.runs.list(
      principalOf(ctx.state).address,
      limit,
      before ? new Date(before) : undefined,
    );
    ctx.body = { runs: runs.map(runView) };
  });
  router.get('/runs/:id', async (ctx) => {
    const { id } = parseInput(runParams, ctx.params, 'params');
    const run = await canvas.runs.get(principalOf(ctx.state).address, id);
    const nodes = await canvas.runs.nodes(id);
    ctx.body = {
      ...runView(run),
      previewUrl: canvas.workspaces.previewUrlOf(run.previewToken),
      inputs: run.inputs,
      document: run.document,
      nodes: nodes.map((node) => ({
        id: node.nodeId,
        state: node.state,
        attempt: node.attempt,
        outputs: node.outputs,
        error: node.error,
        decision: node.decision,
        startedAt: node.startedAt?.toISOString() ?? null,
        endedAt: node.endedAt?.toISOString() ?? null,
      })),
      artifacts: (await canvas.artifacts.list(id)).map((a) => ({
        ...a,
        createdAt: a.createdAt.toISOString(),
      })),
      charged: (await canvas.runs.charged(id)).toString(),
    };
  });
  router.get('/runs/:id/events', async (ctx) => {
    const { id } = parseInput(runParams, ctx.params, 'params');
    const after = parseInput(lastEventId, ctx.get('last-event-id') || ctx.query.after || 0, 'headers');
    const run = await canvas.runs.get(principalOf(ctx.state).address, id);
    const sse = openSse(ctx);
    void canvas.streamEvents(id, after, sse, ENDED_RUN.includes(run.status));
  });
  router.post('/runs/:id/cancel', async (ctx) => {
    const { id } = parseInput(runParams, ctx.params, 'params');
    await canvas.cancel(principalOf(ctx.state), id);
    ctx.status = 202;
    ctx.body = { id, status: 'cancelling' };
  });
  router.post('/runs/:id/nodes/:nodeId/decision', async (ctx) => {
    const { id, nodeId } = parseInput(nodeParams, ctx.params, 'params');
    const body = parseInput(decisionBody, ctx.request.body ?? {}, 'body');
    const decision = await canvas.decide(principalOf(ctx.state), id, nodeId, {
      ...body,
      signature: body.signature as `0x${string}` | undefined,
    });
    ctx.body = { runId: id, nodeId, approved: decision.approved, valueHash: decision.valueHash };
  });
  router.get('/runs/:id/artifacts/:artifactId', async (ctx) => {
    const { id, artifactId } = parseInput(artifactParams, ctx.params, 'params');
    await canvas.runs.get(principalOf(ctx.state).address, id);
    const artifact = await canvas.artifacts.content(id, artifactId);
    ctx.set('Content-Type', artifact.contentType);
    ctx.set(
      'Content-Disposition',
      `attachment; filename="${artifact.name.replace(/[^A-Za-z0-9._-]/g, '_')}"`,
    );
    ctx.set('X-Content-Type-Options', 'nosniff');
    ctx.body = artifact.content;
  });
  return router;
}
