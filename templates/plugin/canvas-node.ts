import { z } from 'zod';
import {
  type CanvasNodeInput,
  type CanvasNodeV1,
  definePlugin,
  extensionPoints,
  provide,
  SigilError,
} from '@sigil/plugin-api';

/** Options an operator gives under `plugins[].options`, checked at start-up. */
const config = z.object({}).strict();

const notImplemented = (member: string): SigilError =>
  new SigilError('internal', `template-plugin-name: ${member} is not implemented yet`);

/**
 * A `canvas-node` (the contract: CanvasNodeV1 in @sigil/plugin-api). Fill in each member; the kit in
 * test/kit.test.ts checks every sentence of the contract and fails until you do.
 */
class Node implements CanvasNodeV1 {
  readonly specVersion = 'v1';
  readonly nodeKind = 'template-plugin-name';
  readonly writes = false;

  constructor(private readonly options: z.infer<typeof config>) {}

  async run(_input: CanvasNodeInput): Promise<Record<string, unknown>> {
    throw notImplemented('run');
  }
}

export default definePlugin({
  kind: 'canvas-node',
  name: 'template-plugin-name',
  specVersion: 'v1',
  description: 'template-plugin-name: a canvas node',
  config,
  // The nodes of a workflow document this plugin runs: those of kind `template-plugin-name`.
  provides: [provide(extensionPoints.canvasNodeKinds, 'template-plugin-name')],
  create: ({ config: options }) => new Node(options),
});
