import { z } from 'zod';
import type { CanvasPortType, CanvasPortV2 } from '../contracts/canvas-node-v2.ts';
import { PORT_VALUE_SCHEMAS } from './ports.ts';
import { templatePaths } from './template.ts';

/**
 * Input ports a node's params declare (`inputs: { draft: 'string' }`), for nodes whose inputs are the
 * user's to name (an LLM prompt, a tool's arguments), and templates that may read only those.
 */

/** A port's type in params. */
export const PORT_TYPE = z.enum(Object.keys(PORT_VALUE_SCHEMAS) as [CanvasPortType, ...CanvasPortType[]]);

/** A declared input's name: one step of the template paths that read it (`{{ inputs.<name> }}`), so no dots and no `__proto__`. */
export const INPUT_PORT_NAME = z
  .string()
  .regex(/^[A-Za-z][A-Za-z0-9_-]{0,62}$/, 'a letter, then letters, digits, _ and -; at most 63 characters');

/** The `inputs` param: each declared input port's type by name; `{}` when absent. */
export const DECLARED_INPUTS = z.record(INPUT_PORT_NAME, PORT_TYPE).default({});

/** The ports of declared inputs, each required (an edge must feed it). */
export const declaredInputPorts = (
  inputs: Readonly<Record<string, CanvasPortType>>,
): Record<string, CanvasPortV2> =>
  Object.fromEntries(Object.entries(inputs).map(([name, type]) => [name, { type }]));

/** The paths `template` reads that are not `inputs.<declared>` or below it. */
export function undeclaredReads(template: string, declared: Readonly<Record<string, unknown>>): string[] {
  return templatePaths(template).filter((path) => {
    const [scope, name] = path.split('.');
    return scope !== 'inputs' || name === undefined || !Object.hasOwn(declared, name);
  });
}

/**
 * Refuses, in a params schema's `superRefine`, a template at `path` that reads anything but a declared
 * input: one issue per such placeholder, so a document is refused at validation, not mid-run.
 */
export function refineTemplate(
  ctx: z.RefinementCtx,
  path: PropertyKey[],
  template: string,
  declared: Readonly<Record<string, unknown>>,
): void {
  for (const read of undeclaredReads(template, declared))
    ctx.addIssue({
      code: 'custom',
      path,
      message: `{{ ${read} }} reads no declared input: a template reads inputs.<name> for a name in params.inputs`,
    });
}
