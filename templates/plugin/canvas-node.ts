import { z } from 'zod';
import {
  type CanvasNodeContextV2,
  type CanvasNodeExampleV2,
  type CanvasNodeV2,
  type CanvasPortsV2,
  definePlugin,
  extensionPoints,
  provide,
  SigilError,
} from '@sigil/plugin-api';

/** Options an operator gives under `plugins[].options`, checked at start-up. */
const config = z.object({}).strict();

/** A node's params in a workflow document, checked when the document is validated. */
const params = z
  .object({
    greeting: z.string().min(1).default('Hello').describe('What the node says before the name'),
  })
  .strict();

type Params = z.infer<typeof params>;

const notImplemented = (member: string): SigilError =>
  new SigilError('internal', `template-plugin-name: ${member} is not implemented yet`);

/**
 * A `canvas-node` (the contract: CanvasNodeV2 in @sigil/plugin-api). Fill in each member; the kit in
 * test/kit.test.ts runs `example` in a fresh git workspace, checks every sentence of the contract and
 * fails until you do.
 */
class Node implements CanvasNodeV2<Params> {
  readonly specVersion = 'v2';
  readonly nodeKind = 'template-plugin-name';
  readonly description = 'template-plugin-name: greets the name on its input';
  // `writes` if it changes files or services: then `run` refuses without approvals, and changes
  // things once per idempotencyKey (see the contract).
  readonly effect = 'none';
  readonly params = params;
  readonly example: CanvasNodeExampleV2 = { params: { greeting: 'Hello' }, inputs: { name: 'Ada' } };

  constructor(private readonly options: z.infer<typeof config>) {}

  ports(_params: Params): CanvasPortsV2 {
    return {
      inputs: { name: { type: 'string', description: 'Who to greet' } },
      outputs: { text: { type: 'string', description: 'The greeting' } },
    };
  }

  async run(_context: CanvasNodeContextV2<Params>): Promise<Record<string, unknown>> {
    // Check `context.signal` first (and between steps), log progress with `context.log`.
    throw notImplemented('run');
  }
}

export default definePlugin({
  kind: 'canvas-node',
  name: 'template-plugin-name',
  specVersion: 'v2',
  description: 'template-plugin-name: a canvas node',
  config,
  // The nodes of a workflow document this plugin runs: those of kind `template-plugin-name`.
  provides: [provide(extensionPoints.canvasNodeKinds, 'template-plugin-name')],
  create: ({ config: options }) => new Node(options),
});
