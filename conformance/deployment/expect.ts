import type { z } from 'zod';
import { excerpt, expectShape, failWith } from '@sigil/plugin-api/kit';
import type { HttpResponse } from '../http.ts';

/** Assertions for deployment checks: each fails the check with a reason a tester can act on. */

/** Fails unless the response has the expected status; the reason quotes the start of the body. */
export function expectStatus(response: HttpResponse, expected: number, what: string): void {
  if (response.status === expected) return;
  const body = response.text === '' ? '' : `: ${excerpt(response.text.replace(/\s+/g, ' '), 200)}`;
  failWith(`${what}: expected HTTP ${expected}, got ${response.status}${body}`);
}

/** Status and body shape in one step, the usual first assertion on a response. */
export function expectJson<S extends z.ZodType>(
  response: HttpResponse,
  status: number,
  schema: S,
  what: string,
): z.infer<S> {
  expectStatus(response, status, what);
  if (response.body === undefined) failWith(`${what}: the body is not JSON`);
  return expectShape(schema, response.body, what);
}

export const sameAddress = (a: string, b: string): boolean => a.toLowerCase() === b.toLowerCase();
