import type { CanvasNodeV2 } from '../contracts/canvas-node-v2.ts';

/**
 * A canvas node typed by its params schema: `ports` and `run` see the params `params` parses to, and
 * the result is the contract a manifest's `create` returns.
 */
export const canvasNode = <Params>(node: CanvasNodeV2<Params>): CanvasNodeV2 =>
  node as unknown as CanvasNodeV2;
