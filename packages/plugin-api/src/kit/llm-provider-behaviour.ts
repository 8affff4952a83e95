import { randomBytes } from 'node:crypto';
import { inspect } from 'node:util';
import type {
  LlmChatRequest,
  LlmErrorKind,
  LlmMessage,
  LlmProviderV1,
  LlmStreamPart,
  LlmToolDefinition,
} from '../index.ts';
import { ensure, failWith, notApplicableBecause, pass } from './check.ts';
import type { InstanceCheck, KitContext } from './kit.ts';
import { llmProviderKit } from './llm-provider.ts';
import { describeKitWithBehaviour } from './mocha.ts';

/**
 * Behaviour of `llm-provider` v1 (packages/plugin-api/src/contracts/llm-provider-v1.ts) against a real upstream:
 * a turn streams and ends with one usage and one finish, a tool call goes round, a cap on output
 * finishes with `length`, cancellation is prompt and reaches the upstream, failures are typed and
 * never carry the key. The prompts are plain instructions a real model follows and the local
 * stand-in's rules answer (`@sigil/plugin-api/llm/stand-in`).
 */

/** What only the tester knows: a working model and key, and how to make the upstream fail. */
export interface LlmProviderHarness {
  /** A model of `listModels()` that answers plain prompts and calls tools. */
  model: string;
  /** A key the upstream accepts. */
  apiKey: string;
  /** A key the upstream refuses; default: `invalid-sigil-kit-<random hex>`. */
  badApiKey?: string;
  /** A model the upstream does not know; default `sigil-kit-no-such-model`. */
  unknownModel?: string;
  /** Request fields that make the upstream answer 429 (e.g. a stand-in's model); absent: not applicable. */
  rateLimited?: Partial<Pick<LlmChatRequest, 'model' | 'apiKey'>>;
  /** Request fields that make the upstream answer 5xx; absent: not applicable. */
  upstreamError?: Partial<Pick<LlmChatRequest, 'model' | 'apiKey'>>;
  /**
   * Request fields for a turn that streams text for several seconds; default: the model, asked to
   * count to 300.
   */
  slow?: Partial<Pick<LlmChatRequest, 'model' | 'messages'>>;
  /**
   * How many requests the upstream is answering now (e.g. the stand-in's `stats().open`), so the kit
   * can see a cancelled request end there too; absent: only the caller's side is checked.
   */
  openUpstreamRequests?(instance: LlmProviderV1): number;
}

const CONTRACT = 'packages/plugin-api/src/contracts/llm-provider-v1.ts';
/** A cancelled iteration must end within this. */
const PROMPT_MS = 1_000;
/** …and the upstream must see its request end within this. */
const UPSTREAM_CLOSE_MS = 3_000;

type Context = KitContext & { instance: LlmProviderV1 };
type ProviderCheck = InstanceCheck<LlmProviderV1>;

const TOOL: LlmToolDefinition = {
  name: 'kit_lookup',
  description: 'Looks a word up and returns its answer. Call it whenever you are asked to.',
  inputSchema: {
    type: 'object',
    properties: { query: { type: 'string' } },
    required: ['query'],
    additionalProperties: false,
  },
};
const TOOL_PROMPT = 'use tool kit_lookup with {"query":"sigil"} and then tell me the answer it returns.';
const TOOL_MARKER = `kit-answer-${randomBytes(3).toString('hex')}`;

const user = (content: string): LlmMessage => ({ role: 'user', content });

/** Text of an error with the given keys taken out, for a failure reason. */
function safeMessage(err: unknown, keys: readonly string[]): string {
  let text = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  for (const key of keys) if (key) text = text.split(key).join('[the key]');
  return text.slice(0, 300);
}

interface Turn {
  parts: LlmStreamPart[];
  text: string;
  error?: unknown;
}

/** Runs one turn to its end (or its error); `onPart` may stop it by returning 'stop'. */
async function runTurn(
  instance: LlmProviderV1,
  request: LlmChatRequest,
  onPart?: (part: LlmStreamPart, parts: readonly LlmStreamPart[]) => 'stop' | undefined,
): Promise<Turn> {
  const parts: LlmStreamPart[] = [];
  try {
    for await (const part of instance.doStream(request)) {
      parts.push(part);
      if (onPart?.(part, parts) === 'stop') break;
    }
  } catch (error) {
    return { parts, text: textOf(parts), error };
  }
  return { parts, text: textOf(parts) };
}

const textOf = (parts: readonly LlmStreamPart[]) =>
  parts.map((part) => (part.type === 'text-delta' ? part.text : '')).join('');

function summary(turn: Turn) {
  return {
    parts: turn.parts.length,
    text: turn.text.slice(0, 200),
    toolCalls: turn.parts.filter((p) => p.type === 'tool-call'),
    usage: turn.parts.find((p) => p.type === 'usage'),
    finish: turn.parts.find((p) => p.type === 'finish'),
  };
}

/** A turn that must succeed: fails the check with the (key-free) error otherwise. */
async function completeTurn(
  { instance, evidence }: Context,
  request: LlmChatRequest,
  what: string,
): Promise<Turn & { finish: LlmStreamPart & { type: 'finish' } }> {
  const turn = await runTurn(instance, request);
  if (turn.error !== undefined) failWith(`${what} failed: ${safeMessage(turn.error, [request.apiKey])}`);
  evidence.note(what, summary(turn));
  checkEnding(turn.parts, what);
  return { ...turn, finish: turn.parts.at(-1) as LlmStreamPart & { type: 'finish' } };
}

/** The contract's ending: exactly one usage, then exactly one finish, last; every part well formed. */
function checkEnding(parts: readonly LlmStreamPart[], what: string): void {
  for (const part of parts) {
    switch (part.type) {
      case 'text-delta':
        ensure(typeof part.text === 'string', `${what}: a text-delta without text`);
        break;
      case 'tool-call':
        ensure(
          typeof part.id === 'string' && part.id !== '' && typeof part.name === 'string',
          `${what}: a tool-call without id or name`,
        );
        ensure(
          typeof part.input === 'object' && part.input !== null && !Array.isArray(part.input),
          `${what}: tool-call ${part.name} has an input that is not an object`,
        );
        break;
      case 'usage':
        for (const field of ['inputTokens', 'outputTokens'] as const)
          ensure(
            Number.isSafeInteger(part[field]) && part[field] >= 0,
            `${what}: usage.${field} is ${String(part[field])}, not a non-negative integer`,
          );
        break;
      case 'finish':
        ensure(
          ['stop', 'tool-calls', 'length', 'error'].includes(part.reason),
          `${what}: finish reason ${String(part.reason)}`,
        );
        break;
      default:
        failWith(`${what}: a part of unknown type ${String((part as { type?: unknown }).type)}`);
    }
  }
  const usages = parts.filter((p) => p.type === 'usage').length;
  const finishes = parts.filter((p) => p.type === 'finish').length;
  ensure(finishes === 1, `${what}: ${finishes} finish parts, expected exactly one`);
  ensure(usages === 1, `${what}: ${usages} usage parts, expected exactly one`);
  ensure(parts.at(-1)?.type === 'finish', `${what}: the finish part is not the last`);
  ensure(parts.at(-2)?.type === 'usage', `${what}: the usage part does not come right before finish`);
}

/**
 * The error a failed turn threw must be an LlmProviderError of `kind`, retryable as its kind says,
 * with none of `keys` anywhere in it (message, stack, fields, cause).
 */
function expectProviderError(
  turn: Turn,
  kind: LlmErrorKind,
  keys: readonly string[],
  context: Context,
): void {
  const { error } = turn;
  ensure(
    error !== undefined,
    `the turn did not fail (${turn.parts.length} parts, finish ${JSON.stringify(turn.parts.at(-1))})`,
  );
  const e = error as Partial<{
    name: string;
    kind: string;
    retryable: boolean;
    message: string;
    status: number;
  }>;
  const everything = [
    String(e.message),
    String((error as Error).stack),
    inspect(error, { depth: 6, showHidden: true }),
    (() => {
      try {
        return JSON.stringify(error, (_, v: unknown) => (typeof v === 'bigint' ? String(v) : v));
      } catch {
        return '';
      }
    })(),
  ].join('\n');
  for (const key of keys)
    ensure(!everything.includes(key), `the key the request carried appears in the ${kind} error it threw`);
  context.evidence.note('the error', {
    name: e.name,
    kind: e.kind,
    retryable: e.retryable,
    status: e.status,
    message: e.message,
  });
  ensure(e.name === 'LlmProviderError', `threw ${safeMessage(error, keys)}, not an LlmProviderError`);
  ensure(e.kind === kind, `threw an LlmProviderError of kind ${String(e.kind)}, expected ${kind}`);
  const retryable = kind === 'rate_limit' || kind === 'upstream';
  ensure(
    e.retryable === retryable,
    `retryable is ${String(e.retryable)} for kind ${kind}, expected ${retryable}`,
  );
  ensure(
    turn.parts.every((p) => p.type !== 'finish'),
    'a finish part came before the error',
  );
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until the upstream's open requests fall to `baseline`; the time it took, or undefined. */
async function upstreamClosed(count: () => number, baseline: number): Promise<number | undefined> {
  const started = performance.now();
  while (performance.now() - started < UPSTREAM_CLOSE_MS) {
    if (count() <= baseline) return performance.now() - started;
    await sleep(10);
  }
  return undefined;
}

export function llmProviderBehaviour(harnessOf: () => LlmProviderHarness): readonly ProviderCheck[] {
  const base = (h: LlmProviderHarness, messages: LlmMessage[]): LlmChatRequest => ({
    model: h.model,
    apiKey: h.apiKey,
    messages,
  });
  const slowRequest = (h: LlmProviderHarness, signal?: AbortSignal): LlmChatRequest => ({
    ...base(h, [user('Count from 1 to 300, the numbers separated by spaces, nothing else.')]),
    ...h.slow,
    ...(signal ? { signal } : {}),
  });

  /** Streams the slow turn, cancels it after the first text with `cancel`, and checks how it ended. */
  async function cancelled(
    context: Context,
    how: 'abort' | 'break',
  ): Promise<{ endedMs: number; turn: Turn; reason: unknown }> {
    const h = harnessOf();
    const open = h.openUpstreamRequests ? () => h.openUpstreamRequests?.(context.instance) ?? 0 : undefined;
    const baseline = open?.() ?? 0;
    const controller = new AbortController();
    const reason = new Error(`sigil kit: cancelled on purpose (${how})`);
    let cancelledAt = 0;
    let openWhenCancelled: number | undefined;
    const turn = await runTurn(context.instance, slowRequest(h, controller.signal), (part) => {
      if (part.type !== 'text-delta' || cancelledAt > 0) return;
      openWhenCancelled = open?.();
      cancelledAt = performance.now();
      if (how === 'break') return 'stop';
      controller.abort(reason);
    });
    const endedMs = performance.now() - cancelledAt;
    ensure(cancelledAt > 0, `no text came before the turn ended (${turn.parts.length} parts)`);
    context.evidence.note(`${how} after the first text: the iteration ended ${endedMs.toFixed(0)} ms later`, {
      parts: turn.parts.length,
      error: turn.error === undefined ? undefined : safeMessage(turn.error, [h.apiKey]),
    });
    ensure(
      endedMs <= PROMPT_MS,
      `the iteration ended ${endedMs.toFixed(0)} ms after the ${how}, over ${PROMPT_MS} ms`,
    );
    ensure(!turn.parts.some((p) => p.type === 'finish'), `a finish part came after the ${how}`);
    if (open) {
      ensure(
        (openWhenCancelled ?? 0) > baseline,
        'the upstream was not answering the request when it was cancelled: the slow turn is too short to tell',
      );
      const closedMs = await upstreamClosed(open, baseline);
      context.evidence.note(
        closedMs === undefined
          ? `the upstream still answers after ${UPSTREAM_CLOSE_MS} ms`
          : `the upstream saw the request end ${closedMs.toFixed(0)} ms after the iteration ended`,
      );
      ensure(
        closedMs !== undefined,
        `the upstream request was still open ${UPSTREAM_CLOSE_MS} ms after the ${how}`,
      );
    }
    return { endedMs, turn, reason };
  }

  return [
    {
      id: 'llm-provider.stream-text',
      level: 'MUST',
      title: 'a turn streams text, then exactly one usage part and exactly one finish part (stop), last',
      spec: `${CONTRACT}: doStream, "then exactly one usage part, then exactly one finish part, which ends the stream"`,
      check: async (context) => {
        const h = harnessOf();
        const turn = await completeTurn(
          context,
          base(h, [user('Say hello to the Sigil kit in five words.')]),
          'a plain turn',
        );
        ensure(turn.text.trim() !== '', 'no text came');
        ensure(turn.finish.reason === 'stop', `finished with ${turn.finish.reason}, expected stop`);
        const usage = turn.parts.at(-2) as { inputTokens: number; outputTokens: number };
        ensure(
          usage.inputTokens > 0 && usage.outputTokens > 0,
          `usage ${JSON.stringify(usage)} counts no tokens`,
        );
        return pass();
      },
    },
    {
      id: 'llm-provider.tool-call',
      level: 'MUST',
      title:
        'a tool call comes whole, with its input parsed to an object, and the turn finishes with tool-calls',
      spec: `${CONTRACT}: doStream, "a tool call is yielded once, complete, with its input parsed to an object"`,
      check: async (context) => {
        const h = harnessOf();
        const turn = await completeTurn(
          context,
          { ...base(h, [user(TOOL_PROMPT)]), tools: [TOOL] },
          'a turn offering kit_lookup',
        );
        const calls = turn.parts.filter((p) => p.type === 'tool-call');
        ensure(calls.length === 1, `${calls.length} tool calls, expected one`);
        const [call] = calls;
        ensure(call?.name === TOOL.name, `called ${call?.name}, expected ${TOOL.name}`);
        ensure(
          JSON.stringify(call.input) === JSON.stringify({ query: 'sigil' }),
          `input ${JSON.stringify(call.input)}, expected {"query":"sigil"}`,
        );
        ensure(
          turn.finish.reason === 'tool-calls',
          `finished with ${turn.finish.reason}, expected tool-calls`,
        );
        return pass();
      },
    },
    {
      id: 'llm-provider.tool-round-trip',
      level: 'MUST',
      title: 'the tool result goes back with the call, and the model answers from it',
      spec: `${CONTRACT}: LlmMessage, assistant toolCalls and "the result of one tool call of the assistant message just before"`,
      check: async (context) => {
        const h = harnessOf();
        const first = await completeTurn(
          context,
          { ...base(h, [user(TOOL_PROMPT)]), tools: [TOOL] },
          'the call',
        );
        const call = first.parts.find((p) => p.type === 'tool-call');
        ensure(call, 'the model called no tool');
        const messages: LlmMessage[] = [
          user(TOOL_PROMPT),
          {
            role: 'assistant',
            content: first.text,
            toolCalls: [{ id: call.id, name: call.name, input: call.input }],
          },
          { role: 'tool', toolCallId: call.id, content: JSON.stringify({ answer: TOOL_MARKER }) },
        ];
        const second = await completeTurn(
          context,
          { ...base(h, messages), tools: [TOOL] },
          'the answer after the result',
        );
        ensure(second.finish.reason === 'stop', `finished with ${second.finish.reason}, expected stop`);
        ensure(
          second.text.includes(TOOL_MARKER),
          `the answer does not quote the tool's result ${TOOL_MARKER}`,
        );
        return pass();
      },
    },
    {
      id: 'llm-provider.max-output-tokens',
      level: 'MUST',
      title: 'a turn that reaches maxOutputTokens finishes with length and counts no more output tokens',
      spec: `${CONTRACT}: maxOutputTokens, "reaching it finishes with length"`,
      check: async (context) => {
        const h = harnessOf();
        const words = 'one two three four five six seven eight nine ten eleven twelve thirteen fourteen';
        const turn = await completeTurn(
          context,
          { ...base(h, [user(`Repeat exactly: ${words}`)]), maxOutputTokens: 3 },
          'a turn capped at 3 output tokens',
        );
        ensure(turn.finish.reason === 'length', `finished with ${turn.finish.reason}, expected length`);
        const usage = turn.parts.at(-2) as { outputTokens: number };
        ensure(usage.outputTokens <= 3, `usage counts ${usage.outputTokens} output tokens over a cap of 3`);
        return pass();
      },
    },
    {
      id: 'llm-provider.abort-cancels',
      level: 'MUST',
      title: 'aborting the signal mid-stream throws its reason at once and cancels the upstream request',
      spec: `${CONTRACT}: doStream, "when signal aborts, the upstream request is cancelled and the iteration throws signal.reason at once"`,
      check: async (context) => {
        const { turn, reason } = await cancelled(context, 'abort');
        ensure(
          turn.error === reason,
          `the iteration ended with ${turn.error === undefined ? 'no error' : safeMessage(turn.error, [harnessOf().apiKey])}, not the signal's reason`,
        );
        return pass();
      },
    },
    {
      id: 'llm-provider.break-cancels',
      level: 'MUST',
      title: 'leaving the iteration early (break) ends it at once and cancels the upstream request',
      spec: `${CONTRACT}: doStream, "ending the iteration early (break, return()) cancels the upstream request as well"`,
      check: async (context) => {
        const { turn } = await cancelled(context, 'break');
        ensure(turn.error === undefined, `break threw ${safeMessage(turn.error, [harnessOf().apiKey])}`);
        return pass();
      },
    },
    {
      id: 'llm-provider.aborted-before-start',
      level: 'MUST',
      title: 'a request whose signal already aborted throws its reason and yields nothing',
      spec: `${CONTRACT}: LlmChatRequest.signal, "aborting it cancels the upstream request; the iteration then throws signal.reason"`,
      check: async (context) => {
        const h = harnessOf();
        const controller = new AbortController();
        const reason = new Error('sigil kit: aborted before the start');
        controller.abort(reason);
        const turn = await runTurn(context.instance, {
          ...base(h, [user('Hello')]),
          signal: controller.signal,
        });
        ensure(turn.parts.length === 0, `${turn.parts.length} parts came`);
        ensure(
          turn.error === reason,
          `ended with ${turn.error === undefined ? 'no error' : safeMessage(turn.error, [h.apiKey])}, not the signal's reason`,
        );
        return pass();
      },
    },
    {
      id: 'llm-provider.auth-error',
      level: 'MUST',
      title: 'a refused key throws LlmProviderError kind auth, not retryable, and the key is nowhere in it',
      spec: `${CONTRACT}: "a refused key is auth"; apiKey "never … put in an error"`,
      check: async (context) => {
        const h = harnessOf();
        const badKey = h.badApiKey ?? `invalid-sigil-kit-${randomBytes(12).toString('hex')}`;
        const turn = await runTurn(context.instance, { ...base(h, [user('Hello')]), apiKey: badKey });
        expectProviderError(turn, 'auth', [badKey], context);
        return pass();
      },
    },
    {
      id: 'llm-provider.key-per-request',
      level: 'MUST',
      title: 'each request uses its own key: good, refused, good again on one instance',
      spec: `${CONTRACT}: "uses the apiKey of each request for that request only: never stored, cached across requests"`,
      check: async (context) => {
        const h = harnessOf();
        const badKey = h.badApiKey ?? `invalid-sigil-kit-${randomBytes(12).toString('hex')}`;
        await completeTurn(context, base(h, [user('First hello')]), 'a turn with the good key');
        const refused = await runTurn(context.instance, {
          ...base(h, [user('Second hello')]),
          apiKey: badKey,
        });
        expectProviderError(refused, 'auth', [badKey, h.apiKey], context);
        await completeTurn(context, base(h, [user('Third hello')]), 'the good key again');
        return pass();
      },
    },
    {
      id: 'llm-provider.bad-request',
      level: 'MUST',
      title: 'an unknown model throws LlmProviderError kind bad_request, not retryable',
      spec: `${CONTRACT}: LlmErrorKind, "bad_request: the upstream refused the request itself (… unknown model …)"`,
      check: async (context) => {
        const h = harnessOf();
        const model = h.unknownModel ?? 'sigil-kit-no-such-model';
        const turn = await runTurn(context.instance, { ...base(h, [user('Hello')]), model });
        expectProviderError(turn, 'bad_request', [h.apiKey], context);
        return pass();
      },
    },
    {
      id: 'llm-provider.rate-limit',
      level: 'MUST',
      title: 'an upstream 429 throws LlmProviderError kind rate_limit, retryable',
      spec: `${CONTRACT}: "HTTP 429 is rate_limit"`,
      check: async (context) => {
        const h = harnessOf();
        if (!h.rateLimited) notApplicableBecause('the harness has no way to make the upstream answer 429');
        const request = { ...base(h, [user('Hello')]), ...h.rateLimited };
        const turn = await runTurn(context.instance, request);
        expectProviderError(turn, 'rate_limit', [request.apiKey], context);
        return pass();
      },
    },
    {
      id: 'llm-provider.upstream-error',
      level: 'MUST',
      title: 'an upstream 5xx throws LlmProviderError kind upstream, retryable',
      spec: `${CONTRACT}: LlmErrorKind, "upstream: anything else (5xx …); retryable"`,
      check: async (context) => {
        const h = harnessOf();
        if (!h.upstreamError) notApplicableBecause('the harness has no way to make the upstream fail');
        const request = { ...base(h, [user('Hello')]), ...h.upstreamError };
        const turn = await runTurn(context.instance, request);
        expectProviderError(turn, 'upstream', [request.apiKey], context);
        return pass();
      },
    },
  ];
}

/**
 * The llm-provider kit (shape and behaviour) as mocha tests, against instances from `load` (fresh and
 * started on each call) and the upstream the harness describes (read when each check runs, so a
 * suite can start its upstream in a `before` hook).
 */
export function describeLlmProviderBehaviour(
  load: () => Promise<LlmProviderV1>,
  harness: () => LlmProviderHarness,
): void {
  describeKitWithBehaviour(llmProviderKit, llmProviderBehaviour(harness), load);
}
