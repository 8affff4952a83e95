import { ensure, pass } from '@sigil/plugin-api/kit';
import { quote } from '../agents.ts';
import type { DeploymentContext, Requirement } from '../context.ts';
import type { SseEvent } from '../sse.ts';
import { approvalEnforcedCheck } from './approval.ts';
import {
  canvasRequest,
  canvasUser,
  endStatus,
  eventsOf,
  execute,
  nodeStatuses,
  otherWallet,
  resume,
  runIdOf,
  runIds,
} from './client.ts';
import { CYCLE, CYCLE_OPENED, DIAMOND, textDag } from './workflows.ts';

/**
 * Canvas workflows (runtime spec part 4, "Canvas rules", and part 6). The spec fixes neither the
 * routes' methods nor any body, so the checks run Sigil's (docs/canvas.md) on the built-in node kinds
 * (`transform`, `approval`, `write-files`): a runtime without `/canvas` is not applicable through the
 * `runtime-canvas` feature, one without the kinds a check needs says which it lacks.
 */

const SPEC_ORDER =
  'runtime spec part 4 ("Canvas rules: nodes run in topological order"); part 1 (a typed DAG executed in topological order)';
const SPEC_SSE =
  'runtime spec part 6 ("Canvas execution streams node status and log events over SSE"); part 4 (/canvas/workflows/execute/stream)';

const canvas = { service: 'runtime', features: ['runtime-canvas'], groups: ['canvas'] } as const;

/** Each `node.status` event, in stream order, written `node:state`, for reasons a tester reads. */
const statusTrail = (events: readonly SseEvent[]) =>
  nodeStatuses(events)
    .map((status) => `${status.nodeId}:${status.state}`)
    .join(' ');

async function topologicalOrder(context: DeploymentContext) {
  const owner = await canvasUser(context, ['transform']);
  const events = eventsOf(await execute(context, owner, textDag('conformance order', DIAMOND)), 'the run');
  const statuses = nodeStatuses(events);
  const first = (nodeId: string, state: string) =>
    statuses.find((status) => status.nodeId === nodeId && status.state === state)?.index;
  for (const [node, inputs] of Object.entries(DIAMOND)) {
    const runs = statuses.filter((status) => status.nodeId === node && status.state === 'running').length;
    ensure(runs === 1, `node ${node} ran ${runs} times, not once: ${statusTrail(events)}`);
    const started = first(node, 'running') as number;
    for (const input of inputs) {
      const done = first(input, 'succeeded');
      ensure(
        done !== undefined && done < started,
        `node ${node} started before its input ${input} succeeded: ${statusTrail(events)}`,
      );
    }
  }
  const status = endStatus(events, 'the run');
  ensure(status === 'succeeded', `the run ended ${status}, not succeeded: ${statusTrail(events)}`);
  context.evidence.note(`each node ran once, after its inputs: ${statusTrail(events)}`);
  return pass();
}

async function sseEvents(context: DeploymentContext) {
  const owner = await canvasUser(context, ['transform']);
  const events = eventsOf(
    await execute(context, owner, textDag('conformance events', { first: [], second: ['first'] })),
    'POST /canvas/workflows/execute/stream',
  );
  runIdOf(events, 'the stream');
  const ids = events.map((event) => event.id);
  ensure(
    ids.every((id) => id !== undefined && id !== ''),
    `every event must carry an id (to resume by): ${events
      .filter((e) => !e.id)
      .map((e) => e.event)
      .join(', ')} have none`,
  );
  ensure(new Set(ids).size === ids.length, `event ids repeat: ${ids.join(', ')}`);
  for (const node of ['first', 'second'])
    for (const state of ['running', 'succeeded'])
      ensure(
        nodeStatuses(events).some((status) => status.nodeId === node && status.state === state),
        `no node.status event says node ${node} is ${state}: ${statusTrail(events)}`,
      );
  ensure(
    events.at(-1)?.event === 'run.ended',
    `the stream's last event is ${events.at(-1)?.event}, not run.ended`,
  );
  context.evidence.note(
    `${events.length} events with ids ${ids[0]}…${ids.at(-1)}: ${events.map((e) => e.event).join(', ')}`,
  );
  return pass();
}

/** An event as compared across two streams: its id, name and data. */
const written = (event: SseEvent) => `${event.id} ${event.event} ${JSON.stringify(event.data)}`;

async function sseResume(context: DeploymentContext) {
  const owner = await canvasUser(context, ['transform']);
  const events = eventsOf(
    await execute(context, owner, textDag('conformance resume', { first: [], second: ['first'] })),
    'POST /canvas/workflows/execute/stream',
  );
  const runId = runIdOf(events, 'the stream');
  const cut = Math.floor(events.length / 2);
  const lastSeen = events[cut - 1]?.id;
  ensure(lastSeen !== undefined, `the stream has too few events (${events.length}) or no ids to resume by`);
  const rest = eventsOf(
    await resume(context, owner, runId, lastSeen),
    `GET /canvas/runs/:id/events (Last-Event-ID: ${lastSeen})`,
  );
  const expected = events.slice(cut).map(written);
  const got = rest.map(written);
  ensure(
    JSON.stringify(got) === JSON.stringify(expected),
    `resumed after ${lastSeen}, the stream gave ${got.length} events (${rest.map((e) => `${e.id} ${e.event}`).join(', ')}), not the ${expected.length} after it (${events
      .slice(cut)
      .map((e) => `${e.id} ${e.event}`)
      .join(', ')})`,
  );
  context.evidence.note(`resumed after event ${lastSeen}: exactly the ${got.length} events after it`);
  return pass();
}

async function cycleRefused(context: DeploymentContext) {
  const owner = await canvasUser(context, ['transform']);
  const opened = await canvasRequest(context, owner, 'POST', '/canvas/workflows/validate', {
    workflow: textDag('conformance chain', CYCLE_OPENED),
  });
  ensure(
    opened.status === 200,
    `the control, the same chain without its closing edge, is not valid: POST /canvas/workflows/validate answered ${opened.status}: ${quote(opened)}`,
  );
  const before = await runIds(context, owner);
  const refused = await canvasRequest(context, owner, 'POST', '/canvas/workflows/execute/stream', {
    workflow: textDag('conformance cycle', CYCLE),
    agentId: owner.agentId,
  });
  ensure(
    refused.status === 400,
    `a cyclic document (loopA → loopB → loopC → loopA) run: expected HTTP 400, got ${refused.status}: ${quote(refused)}`,
  );
  const unnamed = Object.keys(CYCLE).filter((node) => !refused.text.includes(node));
  ensure(
    !unnamed.length,
    `the refusal does not name the cycle's node(s) ${unnamed.join(', ')}: ${quote(refused)}`,
  );
  const after = await runIds(context, owner);
  ensure(
    JSON.stringify(after) === JSON.stringify(before),
    `GET /canvas/runs changed after the refusal: ${before.length} runs before, ${after.length} after`,
  );
  context.evidence.note(`refused with 400 naming ${Object.keys(CYCLE).join(', ')}; no run stored`);
  return pass();
}

async function ownerOnly(context: DeploymentContext) {
  const owner = await canvasUser(context, ['transform']);
  const events = eventsOf(
    await execute(context, owner, textDag('conformance owner', { only: [] })),
    "the owner's run",
  );
  const runId = runIdOf(events, "the owner's run");
  const other = await otherWallet(context);
  const seen = await canvasRequest(context, owner, 'GET', `/canvas/runs/${runId}`);
  ensure(seen.status === 200, `the owner's GET /canvas/runs/:id: expected HTTP 200, got ${seen.status}`);
  ensure(!(await runIds(context, other)).includes(runId), "another wallet's GET /canvas/runs lists the run");
  const attempts = [
    ['GET', `/canvas/runs/${runId}`],
    ['GET', `/canvas/runs/${runId}/events`],
    ['POST', `/canvas/runs/${runId}/cancel`],
  ] as const;
  for (const [method, path] of attempts) {
    const response = await canvasRequest(context, other, method, path);
    ensure(
      response.status === 404,
      `another wallet's ${method} ${path.replace(runId, ':id')}: expected HTTP 404, got ${response.status}: ${quote(response)}`,
    );
  }
  context.evidence.note(
    'another wallet finds the run nowhere: 404 on the run, its events and its cancel, and not in its list',
  );
  return pass();
}

export const canvasRequirements: readonly Requirement[] = [
  {
    id: 'RT-4.canvas-topological-order',
    level: 'MUST',
    title:
      'a DAG whose nodes are listed out of order runs each node once, after every node feeding it succeeded, and ends succeeded',
    spec: SPEC_ORDER,
    ...canvas,
    check: topologicalOrder,
  },
  {
    id: 'RT-4.canvas-cycle-refused',
    level: 'MUST',
    title: 'a cyclic workflow is refused with 400 naming the nodes of the cycle, and no run is stored',
    spec: `${SPEC_ORDER}; a cycle has no topological order`,
    ...canvas,
    check: cycleRefused,
  },
  {
    id: 'RT-4.canvas-approval-enforced',
    level: 'MUST',
    title:
      "a write node with no approval upstream is refused at validation (400); another wallet's decision (404) and a decision signed by another key (403) leave the run waiting; the owner's approval lets the write run",
    spec: 'runtime spec part 4 ("Canvas rules: … write nodes require an upstream approval (enforced)")',
    ...canvas,
    check: approvalEnforcedCheck,
  },
  {
    id: 'RT-6.canvas-sse-events',
    level: 'MUST',
    title:
      'POST /canvas/workflows/execute/stream answers text/event-stream: run.started, node.status events (running, succeeded) for every node, each event with a distinct id, and run.ended last',
    spec: SPEC_SSE,
    ...canvas,
    check: sseEvents,
  },
  {
    id: 'RT-6.canvas-sse-resume',
    level: 'SHOULD',
    title:
      'GET /canvas/runs/:id/events with Last-Event-ID gives exactly the events after that id, then ends with the run',
    spec: `${SPEC_SSE}; docs/canvas.md (a client that disconnects resumes with Last-Event-ID)`,
    ...canvas,
    check: sseResume,
  },
  {
    id: 'RT-5.canvas-owner-only',
    level: 'MUST',
    title:
      'another wallet gets 404 for a run (its details, its events, its cancel) and does not see it listed',
    spec: "runtime spec part 5, rule 2 (endpoints check that the caller owns the agent); docs/canvas.md (everything under /canvas is the wallet's own)",
    ...canvas,
    check: ownerOnly,
  },
];
