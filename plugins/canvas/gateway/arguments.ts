import { renderTemplate, templatePaths, valueAt } from '@sigil/plugin-api/canvas';

/**
 * A tool's arguments in params: JSON whose strings are templates over the node's inputs. A string that
 * is one placeholder and nothing else (`"{{ inputs.count }}"`) takes the value as it is, so a number
 * stays a number and an object an object; any other string is rendered to a string.
 */

const WHOLE_PLACEHOLDER = /^\{\{[^{}]*\}\}$/;

/** `value` with each string replaced by `replace(string, path)`; `path` leads to it from the root. */
export function mapStrings(
  value: unknown,
  replace: (text: string, path: (string | number)[]) => unknown,
  path: (string | number)[] = [],
): unknown {
  if (typeof value === 'string') return replace(value, path);
  if (Array.isArray(value)) return value.map((item, index) => mapStrings(item, replace, [...path, index]));
  if (typeof value === 'object' && value !== null)
    return Object.fromEntries(
      Object.entries(value).map(([key, item]) => [key, mapStrings(item, replace, [...path, key])]),
    );
  return value;
}

/** One argument string rendered over `scope`: the value itself for a lone placeholder (see above). */
export function renderArgument(text: string, scope: Record<string, unknown>): unknown {
  const [path, ...others] = templatePaths(text);
  if (path !== undefined && others.length === 0 && WHOLE_PLACEHOLDER.test(text)) {
    const value = valueAt(scope, path);
    if (value !== undefined) return value;
  }
  return renderTemplate(text, scope);
}
