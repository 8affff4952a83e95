import { z } from 'zod';
import type { CanvasPortType, CanvasPortV2 } from '../contracts/canvas-node-v2.ts';

const JSON_VALUE: z.ZodType<unknown> = z.json();

/** A path inside the workspace: relative, no `..` segment, no empty or `.git` segment. */
export const WORKSPACE_PATH = z
  .string()
  .min(1)
  .max(1024)
  .refine(
    (path) =>
      !path.startsWith('/') &&
      !path.includes('\\') &&
      !path.includes('\0') &&
      path
        .split('/')
        .every((segment) => segment !== '' && segment !== '.' && segment !== '..' && segment !== '.git'),
    'a relative path inside the workspace (no leading /, no . or .. or .git segment)',
  );

/** What a value on a port of each type must be; the executor checks every output against it. */
export const PORT_VALUE_SCHEMAS: Readonly<Record<CanvasPortType, z.ZodType<unknown>>> = Object.freeze({
  string: z.string(),
  number: z.number(),
  boolean: z.boolean(),
  object: z.record(z.string(), JSON_VALUE),
  array: z.array(JSON_VALUE),
  files: z.array(z.object({ path: WORKSPACE_PATH, content: z.string() }).strict()),
  json: JSON_VALUE,
});

/** Whether an output of type `from` may feed an input of type `to`. */
export const portAccepts = (to: CanvasPortType, from: CanvasPortType): boolean =>
  to === 'json' || to === from;

/**
 * An optional input `after` of type `json` taking any value: an edge into it makes a node wait for
 * another whose output it does not use (a push after a write, a browser check after a push).
 */
export const afterInput = (description: string): { after: CanvasPortV2 } => ({
  after: { type: 'json', required: false, description },
});
