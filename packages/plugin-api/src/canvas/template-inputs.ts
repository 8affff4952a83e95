import type { z } from 'zod';
import type { CanvasPortV2 } from '../contracts/canvas-node-v2.ts';
import { templatePaths } from './template.ts';

/**
 * Templates in params that read only the node's inputs (`{{ inputs.title }}`), each input they read
 * becoming an input port of type `json`: a commit message, a pull request's title, with no port to
 * declare beside them.
 */

/** The input each path of `templates` reads (`inputs.page.title` → `page`), as required `json` ports. */
export function templateInputPorts(...templates: string[]): Record<string, CanvasPortV2> {
  const names = templates.flatMap((template) =>
    templatePaths(template).flatMap((path) => {
      const [scope, name] = path.split('.');
      return scope === 'inputs' && name !== undefined ? [name] : [];
    }),
  );
  return Object.fromEntries(
    names.map((name) => [name, { type: 'json', description: `Read by a template as inputs.${name}` }]),
  );
}

/** Refuses, in a params schema's `superRefine`, each placeholder of the template at `path` that is not `inputs.<name>…`. */
export function refineInputsTemplate(context: z.RefinementCtx, path: PropertyKey[], template: string): void {
  for (const read of templatePaths(template))
    if (!/^inputs\.[^.]+/.test(read))
      context.addIssue({
        code: 'custom',
        path,
        message: `{{ ${read} }} reads nothing: a template here reads inputs.<name>`,
      });
}
