import { SigilError } from '../errors.ts';

/**
 * Templates of canvas params: `{{ inputs.draft }}`, `{{ inputs.page.title }}`: a dotted path into the
 * scope, nothing else. No expression is evaluated (workflow documents come from users), so a template
 * can only read values, never run code. A string is inserted as it is, anything else as JSON.
 */
const PLACEHOLDER = /\{\{\s*([A-Za-z_][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*)\s*\}\}/g;

/** The dotted paths a template reads, in order of first use. */
export function templatePaths(template: string): string[] {
  return [...new Set([...template.matchAll(PLACEHOLDER)].map((match) => match[1] as string))];
}

/** The value at a dotted path (`inputs.page.title`), or undefined when any step is missing. */
export function valueAt(scope: unknown, path: string): unknown {
  let value = scope;
  for (const key of path.split('.')) {
    if (typeof value !== 'object' || value === null || !Object.hasOwn(value, key)) return undefined;
    value = (value as Record<string, unknown>)[key];
  }
  return value;
}

/** The template with each placeholder replaced; a path with no value is a clear `invalid_request`. */
export function renderTemplate(template: string, scope: Record<string, unknown>): string {
  return template.replace(PLACEHOLDER, (_, path: string) => {
    const value = valueAt(scope, path);
    if (value === undefined)
      throw new SigilError('invalid_request', `The template reads ${path}, which has no value`, {
        details: { reason: 'template_value_missing', path },
      });
    return typeof value === 'string' ? value : JSON.stringify(value);
  });
}
