import { z } from 'zod';
import { definePlugin, extensionPoints, provide } from '@sigil/plugin-api';
import { TransformNode } from './node.ts';

/** The `transform` canvas node: values between nodes by dotted paths and templates, no code. See README.md. */
export default definePlugin({
  kind: 'canvas-node',
  name: 'canvas-transform',
  specVersion: 'v2',
  description: 'Canvas node transform: picks, maps and templates values between nodes, evaluating no code',
  config: z.object({}).strict(),
  provides: [provide(extensionPoints.canvasNodeKinds, 'transform')],
  create: () => new TransformNode(),
});

export { TransformNode };
export type { TransformParams } from './params.ts';
