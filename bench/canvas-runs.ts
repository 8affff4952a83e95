/**
 * The `canvas` suite's runs: workflow documents of bench nodes, run over the runtime's SSE route and
 * timed from the client's side, and the floor's writes timed the same way.
 */
import { performance } from 'node:perf_hooks';
import { FloorRun } from './canvas-floor.ts';
import { sseEvents, type CanvasWorld } from './canvas-world.ts';

/** One run of a scenario: how long it took, and each of its steps (nodes, or decisions). */
export interface Timed {
  totalMs: number;
  stepsMs: number[];
}

interface WorkflowNode {
  id: string;
  kind: 'noop' | 'approval';
}

const workflow = (nodes: WorkflowNode[], edges: [from: string, to: string][]) => ({
  format: 'sigil.canvas.workflow/v1',
  name: 'bench',
  nodes,
  edges: edges.map(([from, to]) => ({ from, to })),
});

const noop = (id: string): WorkflowNode => ({ id, kind: 'noop' });

/** `n1`, `n2`, … `n<count>`. */
export const nodeIds = (count: number) => Array.from({ length: count }, (_, i) => `n${i + 1}`);

/** `n1 → n2 → … → n<count>`. */
export const chain = (count: number) => {
  const nodes = nodeIds(count).map(noop);
  return workflow(
    nodes,
    nodes.slice(1).map((node, i) => [`n${i + 1}.value`, `${node.id}.after`]),
  );
};

/** One source and `count − 1` nodes fed by it alone. */
export const fanOut = (count: number) => {
  const nodes = Array.from({ length: count - 1 }, (_, i) => noop(`w${i + 1}`));
  return workflow(
    [noop('source'), ...nodes],
    nodes.map((node) => ['source.value', `${node.id}.after`]),
  );
};

/** `start → approve1 → after1 → … → approve<count> → after<count>`: `start` makes the run's workspace. */
const approvals = (count: number) => {
  const nodes: WorkflowNode[] = [noop('start')];
  const edges: [string, string][] = [];
  for (let i = 1; i <= count; i++) {
    edges.push(
      [`${nodes.at(-1)?.id}.value`, `approve${i}.value`],
      [`approve${i}.approved`, `after${i}.after`],
    );
    nodes.push({ id: `approve${i}`, kind: 'approval' }, noop(`after${i}`));
  }
  return workflow(nodes, edges);
};

/** The node ids of `approvals(count)`. */
export const approvalNodeIds = (count: number) => approvals(count).nodes.map((node) => node.id);

/** Starts a run of `document`; its stream's events come as they are read. */
async function execute(world: CanvasWorld, document: object) {
  const started = performance.now();
  const res = await world.send('POST', '/canvas/workflows/execute/stream', {
    agentId: world.agentId,
    workflow: document,
  });
  if (res.status !== 200) throw new Error(`execute: ${res.status} ${await res.text()}`);
  return { started, events: sseEvents(res) };
}

const checkSucceeded = (ended: Record<string, unknown>) => {
  if (ended.status !== 'succeeded') throw new Error(`the run ended ${JSON.stringify(ended)}`);
};

/** A run of no-op nodes to its end; a step per node, between successive `node.status succeeded` events. */
export async function nodesRun(world: CanvasWorld, document: object): Promise<Timed> {
  const { started, events } = await execute(world, document);
  const stepsMs: number[] = [];
  let last = started;
  for await (const { event, data, at } of events) {
    if (event === 'node.status' && data.state === 'succeeded') {
      stepsMs.push(at - last);
      last = at;
    }
    if (event === 'run.ended') {
      checkSucceeded(data);
      return { totalMs: at - started, stepsMs };
    }
  }
  throw new Error('the stream ended before run.ended');
}

/**
 * A run of `count` approvals, each decided (approved) as soon as its `approval.required` is read; a
 * step from each decision's POST to the next node's `node.status running` read on the stream.
 */
export async function approvalsRun(world: CanvasWorld, count: number): Promise<Timed> {
  const { started, events } = await execute(world, approvals(count));
  let runId = '';
  /** When the decision whose next node this is was sent. */
  const decidedAt = new Map<string, number>();
  const decisions: Promise<Response>[] = [];
  const stepsMs: number[] = [];
  for await (const { event, data, at } of events) {
    const nodeId = data.nodeId as string;
    if (event === 'run.started') runId = data.runId as string;
    if (event === 'approval.required') {
      decidedAt.set(nodeId.replace('approve', 'after'), performance.now());
      decisions.push(
        world.send('POST', `/canvas/runs/${runId}/nodes/${nodeId}/decision`, { approved: true }),
      );
    }
    const sentAt = decidedAt.get(nodeId);
    if (event === 'node.status' && data.state === 'running' && sentAt !== undefined)
      stepsMs.push(at - sentAt);
    if (event === 'run.ended') {
      checkSucceeded(data);
      for (const res of await Promise.all(decisions))
        if (res.status !== 200) throw new Error(`decision: ${res.status} ${await res.text()}`);
      return { totalMs: at - started, stepsMs };
    }
  }
  throw new Error('the stream ended before run.ended');
}

/**
 * A floor: `steps` steps of a stored run of `nodeIds`, up to `perWrite` steps a write
 * (`write(run, first, count)`, steps numbered from 1), one write after another; each step's time is
 * its write's ÷ its count. The run is created before the timing and ended after it.
 */
export async function floorRun(
  world: CanvasWorld,
  nodeIds: readonly string[],
  steps: number,
  perWrite: number,
  write: (run: FloorRun, first: number, count: number) => Promise<void>,
): Promise<Timed> {
  const run = await FloorRun.create(world, nodeIds);
  const stepsMs: number[] = [];
  const started = performance.now();
  for (let first = 1; first <= steps; first += perWrite) {
    const count = Math.min(perWrite, steps - first + 1);
    const writeStarted = performance.now();
    await write(run, first, count);
    const each = (performance.now() - writeStarted) / count;
    for (let i = 0; i < count; i++) stepsMs.push(each);
  }
  const totalMs = performance.now() - started;
  await run.end();
  return { totalMs, stepsMs };
}
