import { z } from 'zod';
import { ensure, failWith, notApplicableBecause } from '@sigil/plugin-api/kit';
import type { HttpResponse } from '../../http.ts';
import { someAgent, quote } from '../agents.ts';
import type { DeploymentContext } from '../context.ts';
import { expectJson } from '../expect.ts';
import { parseSse, type SseEvent } from '../sse.ts';
import { bearer, freshWallet, RUNTIME_AUTH, signIn, type SignedIn } from '../wallet.ts';

/**
 * A canvas client as Sigil's routes take it (docs/canvas.md): the runtime spec names
 * `/canvas/workflows/execute/stream` but neither its method nor any body, so a runtime without these
 * routes is not applicable (the `runtime-canvas` feature).
 */

const STREAM_TIMEOUT_MS = 30_000;

const nodeKindsSchema = z.looseObject({ nodeKinds: z.array(z.looseObject({ kind: z.string() })) });
const runsSchema = z.looseObject({ runs: z.array(z.looseObject({ id: z.string() })) });
const runSchema = z.looseObject({
  id: z.string(),
  status: z.string(),
  nodes: z.array(z.looseObject({ id: z.string(), state: z.string() })),
});
const startedSchema = z.looseObject({ runId: z.string().min(1) });
const nodeStatusSchema = z.looseObject({ nodeId: z.string(), state: z.string() });
const approvalSchema = z.looseObject({
  nodeId: z.string(),
  valueHash: z.string(),
  message: z.string().min(1),
});

/** A signed-in wallet of the run, with an agent of its own for runs. */
export interface CanvasUser extends SignedIn {
  agentId: string;
}

export const canvasRequest = (
  context: DeploymentContext,
  as: SignedIn,
  method: 'GET' | 'POST',
  path: string,
  json?: unknown,
) =>
  context.http.request({
    service: 'runtime',
    method,
    path,
    headers: bearer(as.token),
    ...(json === undefined ? {} : { json }),
    timeoutMs: STREAM_TIMEOUT_MS,
  });

/** A fresh wallet, signed in, with an agent; not applicable unless the deployment loads `kinds`. */
export async function canvasUser(context: DeploymentContext, kinds: readonly string[]): Promise<CanvasUser> {
  const signedIn = await signIn(context, RUNTIME_AUTH, freshWallet(context));
  const loaded = expectJson(
    await canvasRequest(context, signedIn, 'GET', '/canvas/node-kinds'),
    200,
    nodeKindsSchema,
    'GET /canvas/node-kinds',
  ).nodeKinds.map((node) => node.kind);
  const missing = kinds.filter((kind) => !loaded.includes(kind));
  if (missing.length)
    notApplicableBecause(
      `the check needs the canvas node kinds ${kinds.join(', ')}; the deployment does not load ${missing.join(', ')} (GET /canvas/node-kinds lists ${loaded.join(', ') || 'none'})`,
    );
  return { ...signedIn, agentId: await someAgent(context, signedIn.token) };
}

/** Another wallet, signed in, to show what it may not see or do. */
export const otherWallet = (context: DeploymentContext) =>
  signIn(context, RUNTIME_AUTH, freshWallet(context));

/** Reads an SSE answer until an event satisfies `until` or the stream ends. */
function streamUntil(
  context: DeploymentContext,
  as: SignedIn,
  request: { method: 'GET' | 'POST'; path: string; json?: unknown; lastEventId?: string },
  until: (event: SseEvent) => boolean,
): Promise<HttpResponse> {
  return context.http.stream(
    {
      service: 'runtime',
      method: request.method,
      path: request.path,
      headers: {
        ...bearer(as.token),
        accept: 'text/event-stream',
        ...(request.lastEventId === undefined ? {} : { 'last-event-id': request.lastEventId }),
      },
      ...(request.json === undefined ? {} : { json: request.json }),
      timeoutMs: STREAM_TIMEOUT_MS,
    },
    (text) => parseSse(text).some(until),
  );
}

export const runEnded = (event: SseEvent) => event.event === 'run.ended';

/** `POST /canvas/workflows/execute/stream` with `workflow`, read until `until` (by default the run's end). */
export function execute(
  context: DeploymentContext,
  as: CanvasUser,
  workflow: unknown,
  until: (event: SseEvent) => boolean = runEnded,
): Promise<HttpResponse> {
  return streamUntil(
    context,
    as,
    { method: 'POST', path: '/canvas/workflows/execute/stream', json: { workflow, agentId: as.agentId } },
    until,
  );
}

/** `GET /canvas/runs/:id/events` resumed after `lastEventId`, read until the run's end. */
export const resume = (context: DeploymentContext, as: SignedIn, runId: string, lastEventId: string) =>
  streamUntil(context, as, { method: 'GET', path: `/canvas/runs/${runId}/events`, lastEventId }, runEnded);

/** The events of a run's stream, which must be an SSE answer. */
export function eventsOf(response: HttpResponse, what: string): SseEvent[] {
  ensure(
    response.status === 200,
    `${what}: expected HTTP 200 (an event stream), got ${response.status}: ${quote(response)}`,
  );
  const type = response.headers.get('content-type') ?? '';
  ensure(
    type.startsWith('text/event-stream'),
    `${what}: Content-Type is ${type || 'absent'}, not text/event-stream`,
  );
  return parseSse(response.text);
}

/** The run id a stream starts with (`run.started`). */
export function runIdOf(events: readonly SseEvent[], what: string): string {
  const started = events.find((event) => event.event === 'run.started');
  if (!started) failWith(`${what}: no run.started event`);
  const parsed = startedSchema.safeParse(started.data);
  if (!parsed.success) failWith(`${what}: run.started names no runId`);
  return parsed.data.runId;
}

/** The `node.status` events, each with its node, state and place in the stream. */
export function nodeStatuses(events: readonly SseEvent[]) {
  return events.flatMap((event, index) => {
    if (event.event !== 'node.status') return [];
    const parsed = nodeStatusSchema.safeParse(event.data);
    return parsed.success ? [{ index, nodeId: parsed.data.nodeId, state: parsed.data.state }] : [];
  });
}

/** How the run ended, from `run.ended`; fails when the stream has none. */
export function endStatus(events: readonly SseEvent[], what: string): string {
  const ended = events.find(runEnded);
  if (!ended) failWith(`${what}: the stream has no run.ended event`);
  return z.looseObject({ status: z.string() }).safeParse(ended.data).data?.status ?? 'unknown';
}

export function approvalRequired(events: readonly SseEvent[], nodeId: string, what: string) {
  const request = events.find(
    (event) =>
      event.event === 'approval.required' && approvalSchema.safeParse(event.data).data?.nodeId === nodeId,
  );
  if (!request) failWith(`${what}: no approval.required event for node ${nodeId}`);
  return approvalSchema.parse(request.data);
}

export async function runOf(context: DeploymentContext, as: SignedIn, runId: string) {
  return expectJson(
    await canvasRequest(context, as, 'GET', `/canvas/runs/${runId}`),
    200,
    runSchema,
    'GET /canvas/runs/:id (the owner)',
  );
}

export async function runIds(context: DeploymentContext, as: SignedIn): Promise<string[]> {
  return expectJson(
    await canvasRequest(context, as, 'GET', '/canvas/runs'),
    200,
    runsSchema,
    'GET /canvas/runs',
  ).runs.map((run) => run.id);
}

/**
 * Cancels a run the check leaves behind and waits for it to end (a cancel is only accepted at once);
 * a failure to is only noted, never the check's result.
 */
export async function cancelLeftover(context: DeploymentContext, as: SignedIn, runId: string): Promise<void> {
  try {
    const run = await runOf(context, as, runId);
    if (['succeeded', 'failed', 'cancelled'].includes(run.status)) return;
    await canvasRequest(context, as, 'POST', `/canvas/runs/${runId}/cancel`);
    await resume(context, as, runId, '0');
  } catch {
    context.evidence.note(`could not cancel run ${runId}, which the check left unfinished`);
  }
}
