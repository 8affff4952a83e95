import { SigilError } from '@sigil/plugin-api';

/** The spec's limit on the serialized arguments of one tool call (gateway spec part 8), meta-tools included. */
export const MAX_ARGUMENT_BYTES = 100 * 1024;

/**
 * Refuses (`payload_too_large`) a tool call, of a server's tool or a meta-tool, whose arguments or
 * whose `_meta` (what the client sent beside them) are over {@link MAX_ARGUMENT_BYTES} serialized.
 */
export function checkPayloadSize(
  args: Record<string, unknown>,
  meta: Record<string, unknown> | undefined,
): void {
  refuseOversized(args, 'Tool arguments');
  if (meta !== undefined) refuseOversized(meta, 'Tool call metadata (_meta)');
}

function refuseOversized(value: unknown, what: string): void {
  const size = Buffer.byteLength(JSON.stringify(value) ?? '');
  if (size <= MAX_ARGUMENT_BYTES) return;
  throw new SigilError(
    'payload_too_large',
    `${what} are ${size} bytes serialized; the limit is ${MAX_ARGUMENT_BYTES}`,
    { details: { limitBytes: MAX_ARGUMENT_BYTES, sizeBytes: size } },
  );
}

/**
 * Containers (objects and arrays) a tool call's arguments may nest, the arguments object included.
 * Deeper input is refused before anything runs: serializing, hashing and proving arguments recurse,
 * and a body of `[[[[…` nested tens of thousands deep overflowed the stack (a 500 after the tool ran).
 */
export const MAX_ARGUMENT_DEPTH = 64;

/** Why arguments are refused, in the error's details (`reason`), for clients that branch on it. */
export type ArgumentProblem = 'lone_surrogate' | 'not_finite' | 'too_deep';

/** What a proof commits to of a call's params, besides its name: see checkArguments. */
export type ProvenParam = 'arguments' | 'inputResponses';

const SUBJECTS: Record<ProvenParam, string> = {
  arguments: 'Tool arguments',
  inputResponses: 'The inputResponses of the retried call',
};

/**
 * Refuses, with `invalid_request` naming the path, arguments (or a 2026-07-28 retry's
 * `inputResponses`, `param`) that a proof cannot commit to: a string or member name holding a lone
 * surrogate, or a number beyond a double (`1e400` parses as Infinity): RFC 8785 takes I-JSON, which
 * has neither, so the proof would fail after the tool ran; or containers nested deeper than
 * {@link MAX_ARGUMENT_DEPTH}. One walk.
 */
export function checkArguments(args: Record<string, unknown>, param: ProvenParam = 'arguments'): void {
  const problem = problemIn(args, 1);
  if (problem) refuse(problem.reason, param, `${param}${problem.path.reverse().join('')}`);
}

/** The first problem in `node`, with its path's segments innermost first (built only on failure). */
interface Found {
  reason: ArgumentProblem;
  path: string[];
}

function problemIn(node: unknown, depth: number): Found | undefined {
  if (typeof node === 'string')
    return node.isWellFormed() ? undefined : { reason: 'lone_surrogate', path: [] };
  if (typeof node === 'number') return Number.isFinite(node) ? undefined : { reason: 'not_finite', path: [] };
  if (typeof node !== 'object' || node === null) return undefined;
  if (depth > MAX_ARGUMENT_DEPTH) return { reason: 'too_deep', path: [] };
  if (Array.isArray(node)) {
    for (let index = 0; index < node.length; index += 1) {
      const found = problemIn(node[index], depth + 1);
      if (found) return (found.path.push(`[${index}]`), found);
    }
    return undefined;
  }
  for (const key in node) {
    const found = key.isWellFormed()
      ? problemIn((node as Record<string, unknown>)[key], depth + 1)
      : { reason: 'lone_surrogate' as const, path: [] };
    if (found) return (found.path.push(IDENTIFIER.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`), found);
  }
  return undefined;
}

const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

const REFUSALS: Record<ArgumentProblem, { message: string; hint: string }> = {
  lone_surrogate: {
    message: 'hold a lone surrogate (half of a UTF-16 pair, which JSON text cannot carry) at',
    hint: 'Send well-formed Unicode strings',
  },
  not_finite: {
    message: 'hold a number beyond the range of a double (I-JSON) at',
    hint: 'Send numbers within ±1.8e308, or large values as strings',
  },
  too_deep: {
    message: `nest deeper than ${MAX_ARGUMENT_DEPTH} levels at`,
    hint: `Flatten them to at most ${MAX_ARGUMENT_DEPTH} nested objects and arrays`,
  },
};

function refuse(reason: ArgumentProblem, param: ProvenParam, path: string): never {
  const { message, hint } = REFUSALS[reason];
  throw new SigilError('invalid_request', `${SUBJECTS[param]} ${message} ${path}`, {
    hint,
    details: { reason, path },
  });
}
