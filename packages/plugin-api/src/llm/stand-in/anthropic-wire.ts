import { z } from 'zod';
import { LOCAL_MODELS } from './catalog.ts';
import { reply, type Turn } from './model.ts';
import { sendJson, statusOf, type Exchange, type FailureKind, type Wire } from './wire.ts';

/** The stand-in's Anthropic Messages wire: `POST /v1/messages`, streaming or not. */

const textBlock = z.looseObject({ type: z.literal('text'), text: z.string() });
const block = z.discriminatedUnion('type', [
  textBlock,
  z.looseObject({
    type: z.literal('tool_use'),
    id: z.string().min(1),
    name: z.string().min(1),
    input: z.record(z.string(), z.unknown()),
  }),
  z.looseObject({
    type: z.literal('tool_result'),
    tool_use_id: z.string().min(1),
    content: z.union([z.string(), z.array(textBlock)]).optional(),
    is_error: z.boolean().optional(),
  }),
]);
const request = z.looseObject({
  model: z.string().min(1),
  max_tokens: z.number().int().positive(),
  messages: z
    .array(
      z.looseObject({ role: z.enum(['user', 'assistant']), content: z.union([z.string(), z.array(block)]) }),
    )
    .min(1),
  system: z.union([z.string(), z.array(textBlock)]).optional(),
  tools: z
    .array(
      z.looseObject({
        name: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/),
        description: z.string().optional(),
        input_schema: z.record(z.string(), z.unknown()),
      }),
    )
    .optional(),
  stream: z.boolean().optional(),
});
type MessagesRequest = z.infer<typeof request>;
type Block = z.infer<typeof block>;

const ERROR_TYPE: Record<FailureKind, string> = {
  auth: 'authentication_error',
  invalid: 'invalid_request_error',
  not_found: 'not_found_error',
  too_large: 'request_too_large',
  rate_limit: 'rate_limit_error',
  server: 'api_error',
};

class Invalid extends Error {}

const joinText = (blocks: readonly { text: string }[]) => blocks.map((b) => b.text).join('');

/**
 * The conversation as turns, checking what Anthropic checks: the tool_use blocks of an assistant
 * message are answered by tool_result blocks in the next (user) message, and a tool_result answers a
 * tool_use of the message just before.
 */
function turnsOf(body: MessagesRequest): Turn[] {
  const turns: Turn[] = [];
  if (body.system !== undefined)
    turns.push({
      role: 'system',
      text: typeof body.system === 'string' ? body.system : joinText(body.system),
    });
  let pending = new Set<string>();
  for (const [index, m] of body.messages.entries()) {
    const blocks: Block[] = typeof m.content === 'string' ? [{ type: 'text', text: m.content }] : m.content;
    if (m.role === 'assistant') {
      if (pending.size > 0) throw missingResults(index, pending);
      const texts = blocks.filter((b) => b.type === 'text');
      const toolCalls = blocks.flatMap((b) =>
        b.type === 'tool_use' ? [{ id: b.id, name: b.name, input: b.input }] : [],
      );
      if (blocks.some((b) => b.type === 'tool_result'))
        throw new Invalid(`messages.${index}: tool_result blocks can only be in user messages`);
      turns.push({ role: 'assistant', text: joinText(texts), toolCalls });
      pending = new Set(toolCalls.map((call) => call.id));
      continue;
    }
    let text: { text: string }[] = [];
    const flushText = () => {
      if (text.length > 0) turns.push({ role: 'user', text: joinText(text) });
      text = [];
    };
    for (const b of blocks) {
      if (b.type === 'tool_use')
        throw new Invalid(`messages.${index}: tool_use blocks can only be in assistant messages`);
      if (b.type === 'text') {
        text.push(b);
        continue;
      }
      if (!pending.delete(b.tool_use_id))
        throw new Invalid(
          `messages.${index}: unexpected tool_use_id found in tool_result blocks: ${b.tool_use_id}. Each tool_result block must have a corresponding tool_use block in the previous message.`,
        );
      flushText();
      const result = typeof b.content === 'string' ? b.content : joinText(b.content ?? []);
      turns.push({ role: 'tool', toolCallId: b.tool_use_id, text: result, isError: b.is_error === true });
    }
    flushText();
    if (pending.size > 0) throw missingResults(index, pending);
  }
  if (pending.size > 0) throw missingResults(body.messages.length, pending);
  return turns;
}

const missingResults = (index: number, pending: Set<string>) =>
  new Invalid(
    `messages.${index}: tool_use ids were found without tool_result blocks immediately after: ${[...pending].join(', ')}. Each tool_use block must have a corresponding tool_result block in the next message.`,
  );

const event = (name: string, value: Record<string, unknown>) =>
  `event: ${name}\ndata: ${JSON.stringify({ type: name, ...value })}\n\n`;

/** Tool input streams as `input_json_delta` fragments this long. */
const JSON_FRAGMENT = 12;

const STOP_REASON = { stop: 'end_turn', tool_calls: 'tool_use', length: 'max_tokens' } as const;

async function handle(x: Exchange): Promise<void> {
  const parsed = request.safeParse(x.body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return anthropicWire.fail(
      x.res,
      'invalid',
      `${issue?.path.join('.') || '(body)'}: ${issue?.message ?? 'invalid'}`,
    );
  }
  const body = parsed.data;
  let turns: Turn[];
  try {
    turns = turnsOf(body);
  } catch (err) {
    if (err instanceof Invalid) return anthropicWire.fail(x.res, 'invalid', err.message);
    throw err;
  }
  if (!x.admitModel(body.model)) return;

  const answer = reply(
    body.model,
    turns,
    (body.tools ?? []).map((tool) => tool.name),
    body.max_tokens,
  );
  const id = `msg_sigil_${x.serial}`;
  const text = answer.deltas.join('');
  const toolUses = answer.toolCalls.map((call) => ({
    type: 'tool_use' as const,
    id: `toolu_${call.id}`,
    name: call.name,
    input: call.input,
  }));
  const stopReason = STOP_REASON[answer.finish];
  const message = {
    id,
    type: 'message',
    role: 'assistant',
    model: body.model,
    stop_sequence: null,
  };

  if (!body.stream) {
    return x.json(200, {
      ...message,
      content: [...(text === '' ? [] : [{ type: 'text', text, citations: null }]), ...toolUses],
      stop_reason: stopReason,
      usage: { input_tokens: answer.inputTokens, output_tokens: answer.outputTokens },
    });
  }

  const frames = [
    event('message_start', {
      message: {
        ...message,
        content: [],
        stop_reason: null,
        usage: { input_tokens: answer.inputTokens, output_tokens: 0 },
      },
    }),
    event('ping', {}),
  ];
  let index = 0;
  if (answer.deltas.length > 0) {
    frames.push(
      event('content_block_start', { index, content_block: { type: 'text', text: '', citations: null } }),
    );
    for (const delta of answer.deltas)
      frames.push(event('content_block_delta', { index, delta: { type: 'text_delta', text: delta } }));
    frames.push(event('content_block_stop', { index }));
    index++;
  }
  for (const use of toolUses) {
    frames.push(event('content_block_start', { index, content_block: { ...use, input: {} } }));
    const json = JSON.stringify(use.input);
    frames.push(
      event('content_block_delta', { index, delta: { type: 'input_json_delta', partial_json: '' } }),
    );
    for (let at = 0; at < json.length; at += JSON_FRAGMENT)
      frames.push(
        event('content_block_delta', {
          index,
          delta: { type: 'input_json_delta', partial_json: json.slice(at, at + JSON_FRAGMENT) },
        }),
      );
    frames.push(event('content_block_stop', { index }));
    index++;
  }
  frames.push(
    event('message_delta', {
      delta: { stop_reason: stopReason, stop_sequence: null },
      usage: { input_tokens: answer.inputTokens, output_tokens: answer.outputTokens },
    }),
    event('message_stop', {}),
  );
  await x.stream(body.model, frames);
}

export const anthropicWire: Wire = {
  chatPath: '/v1/messages',
  fail: (res, kind, message, headers) =>
    sendJson(res, statusOf(kind), { type: 'error', error: { type: ERROR_TYPE[kind], message } }, headers),
  handle,
  models: () => ({
    data: LOCAL_MODELS.map((model) => ({
      type: 'model',
      id: model.id,
      display_name: model.id,
      created_at: '2025-01-01T00:00:00Z',
    })),
    has_more: false,
    first_id: LOCAL_MODELS[0]?.id ?? null,
    last_id: LOCAL_MODELS.at(-1)?.id ?? null,
  }),
};
