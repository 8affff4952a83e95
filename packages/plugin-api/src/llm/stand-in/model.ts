import { createHash } from 'node:crypto';
import { SLOW_MODEL } from './catalog.ts';
import { reflectAnswer } from './reflect.ts';

/**
 * The stand-in's deterministic "model", the same for both wire formats: the wire layers turn a request
 * into `Turn`s and a `Reply` into their own events. Rules (also in the README, "LLM providers"):
 *
 * 1. After tool results (the conversation ends with them), it answers one line per result:
 *    `Tool <name> returned: <result>` (`failed:` for an error result).
 * 2. Otherwise it reads the last user message. When tools are offered and the message says
 *    `use tool <name>` for an offered tool, optionally followed by `with {json object}`, it calls each
 *    tool so named, in order, with that object as arguments (`{}` when none follows or it is not
 *    valid JSON), and writes no text.
 * 3. When the system text carries one of the runtime's self-improvement schemas, it answers that
 *    task's JSON, derived from the request (reflect.ts).
 * 4. Otherwise it echoes the last user message, word for word (`(empty message)` when empty).
 *    `sigil-slow` instead counts `1 2 3 … 1000`.
 * 5. A token is a run of non-whitespace characters. Input tokens: the words of every message (system
 *    included; an assistant's tool call counts its name and its compact JSON arguments); tool
 *    definitions are free. Output tokens: the words of the text plus those of each tool call.
 * 6. With a maximum of output tokens below the text's words, the text is cut after that many words
 *    and the turn finishes with `length`. Tool calls are never cut.
 */

export interface TurnToolCall {
  id: string;
  name: string;
  input: Record<string, unknown>;
}

export type Turn =
  | { role: 'system' | 'user'; text: string }
  | { role: 'assistant'; text: string; toolCalls: TurnToolCall[] }
  | { role: 'tool'; toolCallId: string; text: string; isError: boolean };

export interface Reply {
  /** The text, as the deltas it streams in (joined: the whole text). Empty when it calls tools. */
  deltas: string[];
  /** Calls with ids unique to the conversation (without the wire's prefix). */
  toolCalls: TurnToolCall[];
  finish: 'stop' | 'tool_calls' | 'length';
  inputTokens: number;
  outputTokens: number;
}

export const countTokens = (text: string): number => text.match(/\S+/g)?.length ?? 0;

const callTokens = (call: { name: string; input: Record<string, unknown> }) =>
  countTokens(call.name) + countTokens(JSON.stringify(call.input));

const SLOW_COUNT = 1000;

/** Text split after each word's trailing whitespace: the deltas of a streamed answer. */
const words = (text: string): string[] => text.match(/\s*\S+\s*/g) ?? [text];

/** The end of the JSON object starting at `start` (an index past its closing brace), or -1. */
function objectEnd(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{') depth++;
    else if (c === '}' && --depth === 0) return i + 1;
  }
  return -1;
}

/** The tool calls a message asks for (rule 2), only of offered tools. */
export function requestedToolCalls(
  text: string,
  offered: readonly string[],
): { name: string; input: Record<string, unknown> }[] {
  const calls: { name: string; input: Record<string, unknown> }[] = [];
  for (const match of text.matchAll(/\buse tool\s+([A-Za-z0-9_-]{1,64})/gi)) {
    const name = match[1] as string;
    if (!offered.includes(name)) continue;
    let input: Record<string, unknown> = {};
    const rest = text.slice((match.index ?? 0) + match[0].length);
    const withJson = /^\s+with\s+\{/i.exec(rest);
    if (withJson) {
      const start = withJson[0].length - 1;
      const end = objectEnd(rest, start);
      try {
        const parsed: unknown = end === -1 ? undefined : JSON.parse(rest.slice(start, end));
        if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed))
          input = parsed as Record<string, unknown>;
      } catch {
        // Not JSON: the call has no arguments.
      }
    }
    calls.push({ name, input });
  }
  return calls;
}

function inputTokens(turns: readonly Turn[]): number {
  let total = 0;
  for (const turn of turns) {
    total += countTokens(turn.text);
    if (turn.role === 'assistant') for (const call of turn.toolCalls) total += callTokens(call);
  }
  return total;
}

/** The answer to a conversation (the rules above); `maxTokens` caps the text's words. */
export function reply(
  model: string,
  turns: readonly Turn[],
  offeredTools: readonly string[],
  maxTokens?: number,
): Reply {
  const input = inputTokens(turns);
  const trailing: Extract<Turn, { role: 'tool' }>[] = [];
  for (let i = turns.length - 1; i >= 0 && turns[i]?.role === 'tool'; i--)
    trailing.unshift(turns[i] as Extract<Turn, { role: 'tool' }>);

  let text: string;
  if (trailing.length > 0) {
    const nameOf = (id: string) => {
      for (const turn of turns)
        if (turn.role === 'assistant')
          for (const call of turn.toolCalls) if (call.id === id) return call.name;
      return 'unknown';
    };
    text = trailing
      .map(
        (result) =>
          `Tool ${nameOf(result.toolCallId)} ${result.isError ? 'failed' : 'returned'}: ${result.text}`,
      )
      .join('\n');
  } else {
    const lastUser = [...turns].reverse().find((turn) => turn.role === 'user');
    const said = lastUser?.text ?? '';
    const calls = model === SLOW_MODEL ? [] : requestedToolCalls(said, offeredTools);
    if (calls.length > 0) {
      const seed = createHash('sha256').update(JSON.stringify(turns)).digest('hex').slice(0, 20);
      const toolCalls = calls.map((call, index) => ({ id: `${seed}${index}`, ...call }));
      return {
        deltas: [],
        toolCalls,
        finish: 'tool_calls',
        inputTokens: input,
        outputTokens: toolCalls.reduce((sum, call) => sum + callTokens(call), 0),
      };
    }
    const system = turns
      .filter((turn) => turn.role === 'system')
      .map((turn) => turn.text)
      .join('\n');
    const structured = reflectAnswer(system, said);
    if (structured !== undefined) text = structured;
    else if (model === SLOW_MODEL) text = Array.from({ length: SLOW_COUNT }, (_, i) => i + 1).join(' ');
    else text = said.trim() === '' ? '(empty message)' : said;
  }

  let deltas = words(text);
  let finish: Reply['finish'] = 'stop';
  if (maxTokens !== undefined && countTokens(text) > maxTokens) {
    deltas = deltas.slice(0, maxTokens);
    finish = 'length';
  }
  return { deltas, toolCalls: [], finish, inputTokens: input, outputTokens: countTokens(deltas.join('')) };
}
