/**
 * `canvas-node` v1: one kind of node in a canvas workflow (a typed DAG run in topological order).
 * A node that writes (`writes: true`) only runs after an upstream approval; the executor enforces it.
 */
export interface CanvasNodeV1 {
  /** The version of this contract the instance implements: its manifest's `specVersion`. */
  readonly specVersion: 'v1';
  /**
   * Node kind as it appears in workflow documents, e.g. `write-file`, `browser-verify`; the manifest
   * provides it to `extensionPoints.canvasNodeKinds`, by which a canvas finds this plugin.
   */
  readonly nodeKind: string;
  /** Whether it changes anything outside the workflow (files, services): then it runs only once approved. */
  readonly writes: boolean;
  /** Runs the node with its inputs (outputs of upstream nodes); reports progress through `log`. */
  run(input: CanvasNodeInput): Promise<Record<string, unknown>>;
}

export interface CanvasNodeInput {
  params: Record<string, unknown>;
  upstream: Record<string, Record<string, unknown>>;
  log(message: string): void;
  signal: AbortSignal;
}
