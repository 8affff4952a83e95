import type { z } from 'zod';
import { SigilError } from '@sigil/plugin-api';

/** Parses request input; a mismatch is a 400 naming each bad field, never a 500. */
export function parseInput<S extends z.ZodType>(
  schema: S,
  value: unknown,
  where: 'body' | 'query' | 'params' | 'headers',
): z.infer<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issues = result.error.issues.map((issue) => ({
    path: [where, ...issue.path.map(String)].join('.'),
    message: issue.message,
  }));
  const first = issues[0] as { path: string; message: string };
  throw new SigilError('invalid_request', `Invalid ${first.path}: ${first.message}`, { details: { issues } });
}
