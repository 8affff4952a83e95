import { z } from 'zod';
import { LOCAL_MODELS } from './catalog.ts';
import { reply, type Turn, type TurnToolCall } from './model.ts';
import { sendJson, statusOf, type Exchange, type FailureKind, type Wire } from './wire.ts';

/** The stand-in's OpenAI Chat Completions wire: `POST /v1/chat/completions`, streaming or not. */

const text = z
  .union([z.string(), z.array(z.looseObject({ type: z.literal('text'), text: z.string() })), z.null()])
  .optional();
const toolCall = z.looseObject({
  id: z.string().min(1),
  type: z.literal('function'),
  function: z.looseObject({ name: z.string().min(1), arguments: z.string() }),
});
const message = z.discriminatedUnion('role', [
  z.looseObject({ role: z.literal(['system', 'developer']), content: text }),
  z.looseObject({ role: z.literal('user'), content: text }),
  z.looseObject({ role: z.literal('assistant'), content: text, tool_calls: z.array(toolCall).optional() }),
  z.looseObject({ role: z.literal('tool'), tool_call_id: z.string().min(1), content: text }),
]);
const request = z.looseObject({
  model: z.string().min(1),
  messages: z.array(message).min(1),
  tools: z
    .array(
      z.looseObject({
        type: z.literal('function'),
        function: z.looseObject({
          name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/),
          description: z.string().optional(),
          parameters: z.record(z.string(), z.unknown()).optional(),
        }),
      }),
    )
    .optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullable().optional(),
  max_tokens: z.number().int().positive().nullable().optional(),
  max_completion_tokens: z.number().int().positive().nullable().optional(),
});
type ChatRequest = z.infer<typeof request>;

const ERROR_SHAPE: Record<FailureKind, { type: string; code: string | null }> = {
  auth: { type: 'invalid_request_error', code: 'invalid_api_key' },
  invalid: { type: 'invalid_request_error', code: null },
  not_found: { type: 'invalid_request_error', code: 'model_not_found' },
  too_large: { type: 'invalid_request_error', code: 'request_too_large' },
  rate_limit: { type: 'requests', code: 'rate_limit_exceeded' },
  server: { type: 'server_error', code: null },
};

class Invalid extends Error {}

const contentText = (content: z.infer<typeof text>): string =>
  typeof content === 'string' ? content : (content ?? []).map((part) => part.text).join('');

/** The conversation as turns, checking what OpenAI checks: every tool call answered, right after it. */
function turnsOf(body: ChatRequest): Turn[] {
  const turns: Turn[] = [];
  let pending = new Set<string>();
  const unanswered = () =>
    new Invalid(
      `An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: ${[...pending].join(', ')}`,
    );
  for (const m of body.messages) {
    if (m.role === 'tool') {
      if (!pending.delete(m.tool_call_id))
        throw new Invalid(
          `Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (no call ${m.tool_call_id}).`,
        );
      turns.push({ role: 'tool', toolCallId: m.tool_call_id, text: contentText(m.content), isError: false });
      continue;
    }
    if (pending.size > 0) throw unanswered();
    if (m.role === 'assistant') {
      const toolCalls: TurnToolCall[] = (m.tool_calls ?? []).map((call) => {
        let input: unknown;
        try {
          input = JSON.parse(call.function.arguments);
        } catch {
          throw new Invalid(`tool call ${call.id}: arguments are not valid JSON`);
        }
        if (typeof input !== 'object' || input === null || Array.isArray(input))
          throw new Invalid(`tool call ${call.id}: arguments are not a JSON object`);
        return { id: call.id, name: call.function.name, input: input as Record<string, unknown> };
      });
      pending = new Set(toolCalls.map((call) => call.id));
      turns.push({ role: 'assistant', text: contentText(m.content), toolCalls });
    } else {
      turns.push({ role: m.role === 'user' ? 'user' : 'system', text: contentText(m.content) });
    }
  }
  if (pending.size > 0) throw unanswered();
  return turns;
}

const data = (value: unknown) => `data: ${JSON.stringify(value)}\n\n`;

/** Tool-call arguments stream in fragments this long, as real servers split them. */
const ARGUMENT_FRAGMENT = 12;

async function handle(x: Exchange): Promise<void> {
  const parsed = request.safeParse(x.body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return openAiWire.fail(
      x.res,
      'invalid',
      `Invalid request: ${issue?.path.join('.') || '(body)'}: ${issue?.message ?? 'invalid'}`,
    );
  }
  const body = parsed.data;
  let turns: Turn[];
  try {
    turns = turnsOf(body);
  } catch (err) {
    if (err instanceof Invalid) return openAiWire.fail(x.res, 'invalid', err.message);
    throw err;
  }
  if (!x.admitModel(body.model)) return;

  const maxTokens = body.max_completion_tokens ?? body.max_tokens ?? undefined;
  const answer = reply(
    body.model,
    turns,
    (body.tools ?? []).map((tool) => tool.function.name),
    maxTokens,
  );
  const id = `chatcmpl-sigil-${x.serial}`;
  const created = Math.floor(Date.now() / 1000);
  const finishReason = answer.finish;
  const usage = {
    prompt_tokens: answer.inputTokens,
    completion_tokens: answer.outputTokens,
    total_tokens: answer.inputTokens + answer.outputTokens,
  };
  const toolCalls = answer.toolCalls.map((call) => ({
    id: `call_${call.id}`,
    type: 'function' as const,
    function: { name: call.name, arguments: JSON.stringify(call.input) },
  }));

  if (!body.stream) {
    return x.json(200, {
      id,
      object: 'chat.completion',
      created,
      model: body.model,
      system_fingerprint: 'sigil-stand-in',
      choices: [
        {
          index: 0,
          message: {
            role: 'assistant',
            content: toolCalls.length > 0 ? null : answer.deltas.join(''),
            refusal: null,
            ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
          },
          logprobs: null,
          finish_reason: finishReason,
        },
      ],
      usage,
    });
  }

  const withUsage = body.stream_options?.include_usage === true;
  const frame = (choices: unknown[], usageField: { usage?: typeof usage | null }) =>
    data({
      id,
      object: 'chat.completion.chunk',
      created,
      model: body.model,
      system_fingerprint: 'sigil-stand-in',
      choices,
      ...usageField,
    });
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
    frame([{ index: 0, delta, logprobs: null, finish_reason: finish }], withUsage ? { usage: null } : {});
  // As OpenAI does: content '' opens a text answer, null one that calls tools.
  const frames = [chunk({ role: 'assistant', content: toolCalls.length > 0 ? null : '', refusal: null })];
  for (const delta of answer.deltas) frames.push(chunk({ content: delta }));
  toolCalls.forEach((call, index) => {
    frames.push(
      chunk({
        tool_calls: [
          { index, id: call.id, type: 'function', function: { name: call.function.name, arguments: '' } },
        ],
      }),
    );
    const args = call.function.arguments;
    for (let at = 0; at < args.length; at += ARGUMENT_FRAGMENT)
      frames.push(
        chunk({ tool_calls: [{ index, function: { arguments: args.slice(at, at + ARGUMENT_FRAGMENT) } }] }),
      );
  });
  frames.push(chunk({}, finishReason));
  // The last chunk of a stream that asked for usage: no choice, the usage.
  if (withUsage) frames.push(frame([], { usage }));
  frames.push('data: [DONE]\n\n');
  await x.stream(body.model, frames);
}

export const openAiWire: Wire = {
  chatPath: '/v1/chat/completions',
  fail: (res, kind, message, headers) => {
    const shape = ERROR_SHAPE[kind];
    sendJson(
      res,
      statusOf(kind),
      { error: { message, type: shape.type, param: null, code: shape.code } },
      headers,
    );
  },
  handle,
  models: () => ({
    object: 'list',
    data: LOCAL_MODELS.map((model) => ({
      id: model.id,
      object: 'model',
      created: 1_735_689_600,
      owned_by: 'sigil',
    })),
  }),
};
