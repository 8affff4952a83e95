import { z } from 'zod';
import type { CanvasPortType } from '@sigil/plugin-api';

/**
 * A workflow document, version 1: nodes `{ id, kind, params }` and edges between their typed ports.
 * Published as JSON Schema (docs/canvas-workflow.schema.json, GET /canvas/schema.json).
 */
export const WORKFLOW_FORMAT = 'sigil.canvas.workflow/v1';

const PORT_TYPES = [
  'string',
  'number',
  'boolean',
  'object',
  'array',
  'files',
  'json',
] as const satisfies readonly CanvasPortType[];

/** Node ids and port names: `$inputs` (the run's inputs) can never be one. */
const NAME = /^[a-z][a-z0-9_-]{0,62}$/i;
const name = (what: string) =>
  z.string().regex(NAME, `a ${what}: a letter, then letters, digits, _ and -; at most 63 characters`);

/** `node.port`, or `$inputs.name` for a run input. */
export const PORT_REF = /^(\$inputs|[a-z][a-z0-9_-]{0,62})\.([a-z][a-z0-9_-]{0,62})$/i;
const portRef = z.string().regex(PORT_REF, 'node.port (or $inputs.name for a run input)');

export const workflowDocumentSchema = z
  .object({
    format: z.literal(WORKFLOW_FORMAT).describe('The document format and its version'),
    name: z.string().min(1).max(200),
    description: z.string().max(4000).optional(),
    inputs: z
      .record(
        name('input name'),
        z
          .object({
            type: z.enum(PORT_TYPES),
            required: z.boolean().default(true),
            description: z.string().max(1000).optional(),
          })
          .strict(),
      )
      .default({})
      .describe('What a run is given, fed to nodes by edges from $inputs.<name>'),
    nodes: z
      .array(
        z
          .object({
            id: name('node id'),
            kind: z.string().min(1).max(63).describe('A node kind a loaded canvas-node plugin provides'),
            params: z.record(z.string(), z.unknown()).default({}),
            retries: z.number().int().min(0).default(0).describe('Attempts after the first when it fails'),
            timeoutSeconds: z.number().int().min(1).optional(),
            label: z.string().max(200).optional(),
          })
          .strict(),
      )
      .min(1),
    edges: z
      .array(z.object({ from: portRef, to: portRef }).strict())
      .default([])
      .describe('From an output port (or a run input) to an input port'),
    failurePolicy: z
      .enum(['fail-fast', 'continue'])
      .default('fail-fast')
      .describe(
        'fail-fast: a failure skips every node not yet started; continue: only those downstream of it',
      ),
  })
  .strict();

export type WorkflowDocument = z.infer<typeof workflowDocumentSchema>;
export type WorkflowNode = WorkflowDocument['nodes'][number];

/** The workflow document format as JSON Schema (what a client or an editor validates against). */
export const workflowJsonSchema = (): Record<string, unknown> =>
  z.toJSONSchema(workflowDocumentSchema, { io: 'input' }) as Record<string, unknown>;
