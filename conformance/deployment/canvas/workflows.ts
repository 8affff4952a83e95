/**
 * The workflow documents the canvas checks run (`sigil.canvas.workflow/v1`, docs/canvas.md), made of
 * the built-in kinds: `transform` (a node that evaluates nothing), `approval` and `write-files`.
 */

interface Edge {
  from: string;
  to: string;
}

/**
 * A `transform` node with one string input per upstream node (named after it) and one string output,
 * `text`, naming itself and what it was given: `join(left(root),right(root))`.
 */
export function textNode(id: string, upstream: readonly string[] = []) {
  const text = upstream.length
    ? { template: `${id}(${upstream.map((name) => `{{inputs.${name}}}`).join(',')})` }
    : { value: id };
  return {
    id,
    kind: 'transform',
    params: {
      inputs: Object.fromEntries(upstream.map((name) => [name, 'string'])),
      outputs: { text: { type: 'string', ...text } },
    },
  };
}

/** The edge feeding `to`'s input named after `from` with `from`'s text. */
export const textEdge = (from: string, to: string): Edge => ({ from: `${from}.text`, to: `${to}.${from}` });

export const document = (name: string, nodes: readonly unknown[], edges: readonly Edge[]) => ({
  format: 'sigil.canvas.workflow/v1',
  name,
  nodes,
  edges,
});

/** A text DAG from `upstream` (each node's upstream nodes), its nodes listed in the order given. */
export function textDag(name: string, upstream: Readonly<Record<string, readonly string[]>>) {
  return document(
    name,
    Object.entries(upstream).map(([id, from]) => textNode(id, from)),
    Object.entries(upstream).flatMap(([id, from]) => from.map((source) => textEdge(source, id))),
  );
}

/**
 * A diamond with a tail, listed backwards (every node before the ones it needs):
 * root → left, right → join → tail.
 */
export const DIAMOND: Readonly<Record<string, readonly string[]>> = {
  tail: ['join'],
  join: ['left', 'right'],
  right: ['root'],
  left: ['root'],
  root: [],
};

/** loopA → loopB → loopC → loopA: no topological order exists. */
export const CYCLE: Readonly<Record<string, readonly string[]>> = {
  loopA: ['loopC'],
  loopB: ['loopA'],
  loopC: ['loopB'],
};

/** The same chain with its closing edge left out: a valid document, the cycle check's control. */
export const CYCLE_OPENED: Readonly<Record<string, readonly string[]>> = { ...CYCLE, loopA: [] };

/** A source with one JSON output, `value` (`true`). */
const source = {
  id: 'source',
  kind: 'transform',
  params: { outputs: { value: { type: 'json', value: true } } },
};

/** A write node writing one file from its JSON input `value`. */
const write = {
  id: 'write',
  kind: 'write-files',
  params: {
    files: [{ path: 'conformance.txt', content: 'approved: {{ inputs.value }}' }],
    message: 'conformance: approval enforcement',
  },
};

/** source → write: a write node no approval guards, which validation must refuse. */
export const UNGUARDED_WRITE = document(
  'unguarded write',
  [source, write],
  [{ from: 'source.value', to: 'write.value' }],
);

export const GATE = 'gate';

/** source → gate (approval) → write: the write runs only once the owner approved. */
export const GUARDED_WRITE = document(
  'guarded write',
  [
    source,
    { id: GATE, kind: 'approval', params: { message: 'Conformance: let the write node run?' } },
    write,
  ],
  [
    { from: 'source.value', to: `${GATE}.value` },
    { from: `${GATE}.value`, to: 'write.value' },
  ],
);
