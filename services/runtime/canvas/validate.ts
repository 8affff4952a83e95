import type { z } from 'zod';
import { type CanvasNodeV2, type CanvasPortsV2, type CanvasPortType, SigilError } from '@sigil/plugin-api';
import { portAccepts } from '@sigil/plugin-api/canvas';
import { PORT_REF, workflowDocumentSchema, type WorkflowDocument, type WorkflowNode } from './document.ts';

/** One thing wrong with a document: where (a dotted path into it) and what. */
export interface WorkflowProblem {
  path: string;
  message: string;
}

/** An edge into a node's input: from another node's output or from a run input (`node` `$inputs`). */
export interface InputSource {
  node: string;
  port: string;
}

export interface PlannedNode {
  spec: WorkflowNode;
  plugin: CanvasNodeV2;
  params: unknown;
  ports: CanvasPortsV2;
  /** Each fed input port and where its value comes from. */
  inputs: Record<string, InputSource>;
  /** The nodes this one waits for (sources of its inputs), and those that wait for it. */
  upstream: string[];
  downstream: string[];
  /** The approval nodes upstream of it (its ancestors), whose decisions it is given. */
  approvals: string[];
}

/** A document that passed every check, with what the executor needs: its nodes in topological order. */
export interface ValidatedWorkflow {
  document: WorkflowDocument;
  nodes: Map<string, PlannedNode>;
  order: string[];
}

export interface ValidationOptions {
  nodeKinds: ReadonlyMap<string, CanvasNodeV2>;
  teamMode: boolean;
  maxNodes: number;
  maxRetries: number;
}

const RUN_INPUTS = '$inputs';

/**
 * Checks a workflow document and plans it; refuses with 400 `invalid_request` listing every problem
 * with its path: the document's shape, unknown kinds, params a node refuses, team-mode nodes while
 * the flag is off, unknown ports, type mismatches across an edge, an input fed twice or a required
 * one not fed, a cycle (naming its nodes), and a write node reachable without an approval.
 */
export function validateWorkflow(input: unknown, options: ValidationOptions): ValidatedWorkflow {
  const parsed = workflowDocumentSchema.safeParse(input);
  if (!parsed.success) refuse(parsed.error.issues.map(issueProblem('')));
  const document = parsed.data;
  const problems: WorkflowProblem[] = [];
  if (document.nodes.length > options.maxNodes)
    problems.push({ path: 'nodes', message: `at most ${options.maxNodes} nodes a workflow` });
  const nodes = planNodes(document, options, problems);
  if (problems.length === 0) connectEdges(document, nodes, problems);
  if (problems.length > 0) refuse(problems);
  const order = topologicalOrder(nodes, problems);
  if (problems.length === 0) checkApprovals(document, nodes, order, problems);
  if (problems.length > 0) refuse(problems);
  return { document, nodes, order };
}

function refuse(problems: WorkflowProblem[]): never {
  const first = problems[0] as WorkflowProblem;
  throw new SigilError(
    'invalid_request',
    `The workflow is not valid: ${first.path ? `${first.path}: ` : ''}${first.message}${problems.length > 1 ? ` (and ${problems.length - 1} more)` : ''}`,
    { details: { reason: 'workflow_invalid', problems } },
  );
}

const issueProblem =
  (prefix: string) =>
  (issue: z.core.$ZodIssue): WorkflowProblem => ({
    path: [prefix, ...issue.path.map(String)].filter(Boolean).join('.'),
    message: issue.message,
  });

function planNodes(
  document: WorkflowDocument,
  options: ValidationOptions,
  problems: WorkflowProblem[],
): Map<string, PlannedNode> {
  const nodes = new Map<string, PlannedNode>();
  for (const [index, spec] of document.nodes.entries()) {
    const at = `nodes.${index}`;
    if (nodes.has(spec.id)) {
      problems.push({ path: `${at}.id`, message: `duplicate node id "${spec.id}"` });
      continue;
    }
    if (spec.retries > options.maxRetries)
      problems.push({ path: `${at}.retries`, message: `at most ${options.maxRetries} retries` });
    const plugin = options.nodeKinds.get(spec.kind);
    if (!plugin) {
      problems.push({
        path: `${at}.kind`,
        message: `unknown node kind "${spec.kind}"; loaded kinds: ${[...options.nodeKinds.keys()].sort().join(', ') || 'none'}`,
      });
      continue;
    }
    if (plugin.teamMode === true && !options.teamMode) {
      problems.push({
        path: `${at}.kind`,
        message: `node kind "${spec.kind}" is team mode, which this runtime has off (runtime.canvas.teamMode)`,
      });
      continue;
    }
    const params = plugin.params.safeParse(spec.params);
    if (!params.success) {
      problems.push(...params.error.issues.map(issueProblem(`${at}.params`)));
      continue;
    }
    nodes.set(spec.id, {
      spec,
      plugin,
      params: params.data,
      ports: plugin.ports(params.data),
      inputs: {},
      upstream: [],
      downstream: [],
      approvals: [],
    });
  }
  return nodes;
}

function connectEdges(
  document: WorkflowDocument,
  nodes: Map<string, PlannedNode>,
  problems: WorkflowProblem[],
): void {
  for (const [index, edge] of document.edges.entries()) {
    const at = `edges.${index}`;
    const [, fromNode, fromPort] = PORT_REF.exec(edge.from) as RegExpExecArray;
    const [, toNode, toPort] = PORT_REF.exec(edge.to) as RegExpExecArray;
    const fromType = sourceType(document, nodes, fromNode as string, fromPort as string);
    if (typeof fromType !== 'string') {
      problems.push({ path: `${at}.from`, message: fromType.problem });
      continue;
    }
    const target = nodes.get(toNode as string);
    if (!target) {
      problems.push({ path: `${at}.to`, message: `no node "${toNode}"` });
      continue;
    }
    const port = target.ports.inputs[toPort as string];
    if (!port) {
      problems.push({
        path: `${at}.to`,
        message: `node "${toNode}" (${target.spec.kind}) has no input "${toPort}"; its inputs: ${Object.keys(target.ports.inputs).join(', ') || 'none'}`,
      });
      continue;
    }
    if (!portAccepts(port.type, fromType)) {
      problems.push({
        path: at,
        message: `${edge.from} gives ${fromType}, ${edge.to} takes ${port.type}`,
      });
      continue;
    }
    if (target.inputs[toPort as string]) {
      problems.push({ path: `${at}.to`, message: `input ${edge.to} is already fed by another edge` });
      continue;
    }
    target.inputs[toPort as string] = { node: fromNode as string, port: fromPort as string };
    if (fromNode !== RUN_INPUTS && fromNode !== toNode) {
      const source = nodes.get(fromNode as string) as PlannedNode;
      if (!target.upstream.includes(fromNode as string)) target.upstream.push(fromNode as string);
      if (!source.downstream.includes(toNode as string)) source.downstream.push(toNode as string);
    } else if (fromNode === toNode) {
      problems.push({ path: at, message: `node "${toNode}" feeds itself (a cycle: ${toNode} → ${toNode})` });
    }
  }
  for (const [index, spec] of document.nodes.entries()) {
    const node = nodes.get(spec.id);
    if (!node || node.spec !== spec) continue;
    for (const [port, declared] of Object.entries(node.ports.inputs))
      if (declared.required !== false && !node.inputs[port])
        problems.push({
          path: `nodes.${index}`,
          message: `required input ${spec.id}.${port} (${declared.type}) has no edge`,
        });
  }
}

function sourceType(
  document: WorkflowDocument,
  nodes: Map<string, PlannedNode>,
  node: string,
  port: string,
): CanvasPortType | { problem: string } {
  if (node === RUN_INPUTS) {
    const input = document.inputs[port];
    return input ? input.type : { problem: `the workflow declares no input "${port}"` };
  }
  const source = nodes.get(node);
  if (!source) return { problem: `no node "${node}"` };
  const output = source.ports.outputs[port];
  if (!output)
    return {
      problem: `node "${node}" (${source.spec.kind}) has no output "${port}"; its outputs: ${Object.keys(source.ports.outputs).join(', ') || 'none'}`,
    };
  return output.type;
}

/** Kahn's algorithm in document order; a cycle is reported with the nodes along it. */
function topologicalOrder(nodes: Map<string, PlannedNode>, problems: WorkflowProblem[]): string[] {
  const waiting = new Map([...nodes].map(([id, node]) => [id, node.upstream.length]));
  const ready = [...nodes.keys()].filter((id) => waiting.get(id) === 0);
  const order: string[] = [];
  while (ready.length > 0) {
    const id = ready.shift() as string;
    order.push(id);
    for (const next of (nodes.get(id) as PlannedNode).downstream) {
      const left = (waiting.get(next) as number) - 1;
      waiting.set(next, left);
      if (left === 0) ready.push(next);
    }
  }
  if (order.length < nodes.size) {
    const cycle = findCycle(nodes, new Set(order));
    problems.push({ path: 'edges', message: `the edges make a cycle: ${cycle.join(' → ')}` });
  }
  return order;
}

/** A cycle among the nodes Kahn's algorithm left: walk upstream until a node repeats. */
function findCycle(nodes: Map<string, PlannedNode>, ordered: Set<string>): string[] {
  const start = [...nodes.keys()].find((id) => !ordered.has(id)) as string;
  const path: string[] = [];
  let current = start;
  while (!path.includes(current)) {
    path.push(current);
    current = (nodes.get(current) as PlannedNode).upstream.find((id) => !ordered.has(id)) as string;
  }
  return [...path.slice(path.indexOf(current)), current].reverse();
}

/**
 * Records each node's upstream approvals, and refuses a write node that some path from a node with no
 * upstream reaches without passing an approval node.
 */
function checkApprovals(
  document: WorkflowDocument,
  nodes: Map<string, PlannedNode>,
  order: string[],
  problems: WorkflowProblem[],
): void {
  /** Whether some path from a root reaches the node without an approval (the node itself excluded). */
  const unapproved = new Map<string, boolean>();
  for (const id of order) {
    const node = nodes.get(id) as PlannedNode;
    const ancestors = new Set<string>();
    for (const up of node.upstream) {
      const source = nodes.get(up) as PlannedNode;
      for (const approval of source.approvals) ancestors.add(approval);
      if (source.plugin.effect === 'approval') ancestors.add(up);
    }
    node.approvals = [...ancestors];
    const open =
      node.upstream.length === 0 ||
      node.upstream.some((up) => nodes.get(up)?.plugin.effect !== 'approval' && unapproved.get(up) === true);
    unapproved.set(id, open);
    if (node.plugin.effect === 'writes' && open) {
      const index = document.nodes.findIndex((spec) => spec.id === id);
      problems.push({
        path: `nodes.${index}`,
        message: `write node "${id}" (${node.spec.kind}) can be reached without an approval: put an approval node upstream of it on every path`,
      });
    }
  }
}
