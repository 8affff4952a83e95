import type { CanvasNodeV1, CanvasNodeV2 } from '../index.ts';
import { canvasNodeV2Checks } from './canvas-node-v2-checks.ts';
import type { ContractKit } from './kit.ts';
import { describeContractKit, type RegisterOptions } from './mocha.ts';

/** `canvas-node` v1 kit: the contract's shape. */
export const canvasNodeKit: ContractKit<'canvas-node', 'v1'> = {
  kind: 'canvas-node',
  specVersion: 'v1',
  contractFile: 'packages/plugin-api/src/contracts/canvas-node-v1.ts',
  members: { nodeKind: 'string', writes: 'boolean', run: 'function' },
  behaviour: [],
};

/**
 * `canvas-node` v2 kit: the shape, then one check per promise of canvas-node-v2.ts, each running the
 * node's example in a fresh git workspace (canvas-node-v2-checks.ts). A check that needs the example
 * to succeed does not apply to a node whose example needs a model turn or a gateway tool, which the
 * kit refuses; the approval, cancellation and no-change checks apply to every node.
 */
export const canvasNodeKitV2: ContractKit<'canvas-node', 'v2'> = {
  kind: 'canvas-node',
  specVersion: 'v2',
  contractFile: 'packages/plugin-api/src/contracts/canvas-node-v2.ts',
  members: {
    nodeKind: 'string',
    description: 'string',
    effect: 'string',
    teamMode: 'boolean?',
    params: 'object',
    ports: 'function',
    example: 'object',
    run: 'function',
  },
  behaviour: canvasNodeV2Checks,
};

export const describeCanvasNodeKit = (load: () => Promise<CanvasNodeV1>): void =>
  describeContractKit(canvasNodeKit, load);

export const describeCanvasNodeKitV2 = (
  load: () => Promise<CanvasNodeV2>,
  options: RegisterOptions = {},
): void => describeContractKit(canvasNodeKitV2, load, options);
