import type { CanvasNodeV1, CanvasNodeV2 } from '../index.ts';
import type { ContractKit } from './kit.ts';
import { describeContractKit } from './mocha.ts';

/** `canvas-node` v1 kit: the contract's shape. */
export const canvasNodeKit: ContractKit<'canvas-node', 'v1'> = {
  kind: 'canvas-node',
  specVersion: 'v1',
  contractFile: 'packages/plugin-api/src/contracts/canvas-node-v1.ts',
  members: { nodeKind: 'string', writes: 'boolean', run: 'function' },
  behaviour: [],
};

/** `canvas-node` v2 kit: the shape, then one check per promise of canvas-node-v2.ts. */
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
  behaviour: [],
};

export const describeCanvasNodeKit = (load: () => Promise<CanvasNodeV1>): void =>
  describeContractKit(canvasNodeKit, load);

export const describeCanvasNodeKitV2 = (load: () => Promise<CanvasNodeV2>): void =>
  describeContractKit(canvasNodeKitV2, load);
