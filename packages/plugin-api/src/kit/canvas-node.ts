import type { CanvasNodeV1 } from '../index.ts';
import type { ContractKit } from './kit.ts';
import { describeContractKit } from './mocha.ts';

/** `canvas-node` v1 kit: for now the contract's shape; behaviour lands in `behaviour`. */
export const canvasNodeKit: ContractKit<'canvas-node', 'v1'> = {
  kind: 'canvas-node',
  specVersion: 'v1',
  contractFile: 'packages/plugin-api/src/contracts/canvas-node-v1.ts',
  members: { nodeKind: 'string', writes: 'boolean', run: 'function' },
  // Next, one check per promise of canvas-node-v1.ts:
  // - nodeKind is a lowercase, dash-separated name as used in workflow documents;
  // - run() resolves to an output object, reporting progress through `log`;
  // - run() stops when `signal` aborts.
  behaviour: [],
};

export const describeCanvasNodeKit = (load: () => Promise<CanvasNodeV1>): void =>
  describeContractKit(canvasNodeKit, load);
