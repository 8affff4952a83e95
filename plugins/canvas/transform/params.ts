import { z } from 'zod';
import type { CanvasPortType } from '@sigil/plugin-api';
import { PORT_VALUE_SCHEMAS, templatePaths } from '@sigil/plugin-api/canvas';

/** A port name: also a step of the paths that read it (`inputs.<name>`), so no dots and no `__proto__`. */
const PORT_NAME = z
  .string()
  .regex(/^[A-Za-z][A-Za-z0-9_-]{0,62}$/, 'a letter, then letters, digits, _ and -; at most 63 characters');

const PORT_TYPE = z.enum(
  Object.keys(PORT_VALUE_SCHEMAS) as [CanvasPortType, ...CanvasPortType[]],
) satisfies z.ZodType<CanvasPortType>;

/** A dotted path into the node's scope, as `valueAt` and template placeholders read it. */
const PATH = z
  .string()
  .regex(/^[A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*$/, 'a dotted path such as inputs.draft.title');

const TEMPLATE = z.string().max(1_000_000);

const fileSchema = z
  .object({
    path: z.string().min(1).max(1_024).describe('The file path, relative to the workspace; a template'),
    template: TEMPLATE.describe("The file's content; a template, e.g. {{inputs.page}}"),
  })
  .strict();

/** How one output port gets its value: exactly one of `from`, `template`, `value` and `files`. */
const outputSchema = z
  .object({
    type: PORT_TYPE,
    description: z.string().max(500).optional(),
    from: PATH.optional().describe('The value at a dotted path, e.g. inputs.draft.title'),
    template: TEMPLATE.optional().describe('A string with {{inputs.…}} placeholders (type string or json)'),
    value: z.json().optional().describe('A literal JSON value of the type'),
    files: z
      .array(fileSchema)
      .min(1)
      .max(100)
      .optional()
      .describe('Files made from templates (type files), e.g. an LLM answer as index.html'),
  })
  .strict()
  .superRefine((output, context) => {
    const sources = (['from', 'template', 'value', 'files'] as const).filter(
      (key) => output[key] !== undefined,
    );
    if (sources.length !== 1)
      context.addIssue({
        code: 'custom',
        message: `exactly one of from, template, value and files (found ${sources.join(', ') || 'none'})`,
      });
    if (output.template !== undefined && output.type !== 'string' && output.type !== 'json')
      context.addIssue({
        code: 'custom',
        path: ['template'],
        message: 'a template makes a string or json output',
      });
    if (output.files !== undefined && output.type !== 'files')
      context.addIssue({ code: 'custom', path: ['files'], message: 'files make a files output' });
    if (output.value !== undefined && !PORT_VALUE_SCHEMAS[output.type].safeParse(output.value).success)
      context.addIssue({ code: 'custom', path: ['value'], message: `not a value of type ${output.type}` });
  });

export type TransformOutput = z.infer<typeof outputSchema>;

/** Every dotted path an output reads, with where in the output it is written. */
function pathsRead(output: TransformOutput): { path: string; at: (string | number)[] }[] {
  const inTemplate = (template: string, at: (string | number)[]) =>
    templatePaths(template).map((path) => ({ path, at }));
  return [
    ...(output.from === undefined ? [] : [{ path: output.from, at: ['from'] }]),
    ...(output.template === undefined ? [] : inTemplate(output.template, ['template'])),
    ...(output.files ?? []).flatMap((file, index) => [
      ...inTemplate(file.path, ['files', index, 'path']),
      ...inTemplate(file.template, ['files', index, 'template']),
    ]),
  ];
}

/**
 * The params of a `transform` node: its input ports by type, and its output ports with what each is
 * made of. Every path read must start at a declared input (`inputs.<name>`), so nothing else, no
 * prototype either, is in reach.
 */
export const paramsSchema = z
  .object({
    inputs: z
      .record(PORT_NAME, PORT_TYPE)
      .default({})
      .refine((inputs) => Object.keys(inputs).length <= 32, 'at most 32 inputs')
      .describe('The input ports and their types, e.g. { "draft": "object" }'),
    outputs: z
      .record(PORT_NAME, outputSchema)
      .refine((outputs) => Object.keys(outputs).length >= 1, 'at least one output')
      .refine((outputs) => Object.keys(outputs).length <= 32, 'at most 32 outputs')
      .describe('The output ports: a type and what the value is made of'),
  })
  .strict()
  .superRefine((params, context) => {
    for (const [name, output] of Object.entries(params.outputs))
      for (const { path, at } of pathsRead(output)) {
        const [root, port] = path.split('.');
        if (root === 'inputs' && port !== undefined && Object.hasOwn(params.inputs, port)) continue;
        context.addIssue({
          code: 'custom',
          path: ['outputs', name, ...at],
          message: `reads ${path}, which is not inputs.<a declared input>`,
        });
      }
  });

export type TransformParams = z.infer<typeof paramsSchema>;
