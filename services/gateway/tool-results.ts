import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { Redactor } from '@sigil/plugin-api';

/**
 * Containers a tool result may nest. Only a guard for the gateway's own recursion (this walk, and the
 * proof's RFC 8785 form): a deeper result is withheld as the server's error, and so never charged.
 */
export const MAX_RESULT_DEPTH = 256;

/** A result nested deeper than {@link MAX_RESULT_DEPTH}: the server broke the protocol. */
export const TOO_DEEP = Symbol('too deep');

/** A tool result that reports an error in text, as MCP clients show tool errors. */
export const toolError = (text: string): CallToolResult => ({
  isError: true,
  content: [{ type: 'text', text }],
});

/**
 * A tool result as the client receives it and its proof commits to, in one walk that copies only what
 * changes: every string and member name with the process's secrets redacted (every encoding), with
 * each lone surrogate as U+FFFD and each number beyond a double as null (what JSON.stringify makes of
 * them). A result is proven after the tool ran, so nothing in it may make the proof fail (RFC 8785
 * refuses both): that would turn a delivered side effect into an unpaid call.
 */
export function cleanResult(result: CallToolResult, redactor: Redactor): CallToolResult | typeof TOO_DEEP {
  return clean(result, redactor, 1) as CallToolResult | typeof TOO_DEEP;
}

/**
 * Anything else a server sends about a call (a progress report, a log message), cleaned as its results
 * are; TOO_DEEP when nested past the limit.
 */
export const cleanValue = <T>(value: T, redactor: Redactor): T | typeof TOO_DEEP =>
  clean(value, redactor, 1) as T | typeof TOO_DEEP;

const cleanText = (text: string, redactor: Redactor): string =>
  redactor.text(text.isWellFormed() ? text : text.toWellFormed());

function clean(node: unknown, redactor: Redactor, depth: number): unknown {
  if (typeof node === 'string') return cleanText(node, redactor);
  // A number beyond a double (`1e400` parses as Infinity) as JSON.stringify writes it: null.
  if (typeof node === 'number') return Number.isFinite(node) ? node : null;
  if (typeof node !== 'object' || node === null) return node;
  if (depth > MAX_RESULT_DEPTH) return TOO_DEEP;
  if (Array.isArray(node)) {
    let copy: unknown[] | undefined;
    for (let index = 0; index < node.length; index += 1) {
      const child: unknown = node[index];
      const cleaned = clean(child, redactor, depth + 1);
      if (cleaned === TOO_DEEP) return TOO_DEEP;
      if (cleaned !== child) (copy ??= node.slice())[index] = cleaned;
    }
    return copy ?? node;
  }
  // for…in, not Object.entries: no array per object on every call's path (JSON.parse makes no inherited members).
  let copy: Record<string, unknown> | undefined;
  const object = node as Record<string, unknown>;
  for (const key in object) {
    const child = object[key];
    const cleanKey = cleanText(key, redactor);
    const cleaned = clean(child, redactor, depth + 1);
    if (cleaned === TOO_DEEP) return TOO_DEEP;
    if (copy === undefined && (cleanKey !== key || cleaned !== child)) copy = membersBefore(object, key);
    if (copy !== undefined) setMember(copy, cleanKey, cleaned);
  }
  return copy ?? node;
}

/** An own member, also when named `__proto__` (as JSON.parse makes it), which assignment would not be. */
const setMember = (object: Record<string, unknown>, key: string, value: unknown): void =>
  void Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });

/** A copy of the members of `object` that come before `key` (from which on the copy is rebuilt). */
function membersBefore(object: Record<string, unknown>, key: string): Record<string, unknown> {
  const copy: Record<string, unknown> = {};
  for (const earlier in object) {
    if (earlier === key) break;
    setMember(copy, earlier, object[earlier]);
  }
  return copy;
}
