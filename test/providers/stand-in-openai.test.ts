import { expect } from 'chai';
import OpenAI from 'openai';
import type { ChatCompletionChunk, ChatCompletionTool } from 'openai/resources/chat/completions';
import { startStandIn, type StandIn } from '../../providers/local/index.ts';

/**
 * The local stand-in driven by the official `openai` SDK, as any OpenAI client would: the Chat
 * Completions wire format, streaming and not, tool calls, usage, errors and models.
 */

const tools: ChatCompletionTool[] = [
  {
    type: 'function',
    function: { name: 'get_weather', description: 'Weather in a city', parameters: { type: 'object' } },
  },
  {
    type: 'function',
    function: { name: 'get_time', description: 'Time in a city', parameters: { type: 'object' } },
  },
];

describe('local stand-in, OpenAI wire (openai SDK)', function () {
  this.timeout(30_000);
  let standIn: StandIn;
  let client: OpenAI;
  const clientWith = (apiKey: string) =>
    new OpenAI({ apiKey, baseURL: `${standIn.url}/v1`, maxRetries: 0, logLevel: 'off' });

  before(async () => {
    standIn = await startStandIn({ slowDelayMs: 20 });
    client = clientWith('sk-test-openai');
  });
  after(() => standIn.close());

  async function collect(stream: AsyncIterable<ChatCompletionChunk>) {
    const chunks: ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    return chunks;
  }

  it('streams the last user message back word by word, then a usage chunk counting words', async () => {
    const chunks = await collect(
      await client.chat.completions.create({
        model: 'sigil-echo',
        messages: [
          { role: 'system', content: 'You are a test.' },
          { role: 'user', content: 'Hello there, stand-in!' },
        ],
        stream: true,
        stream_options: { include_usage: true },
      }),
    );
    const deltas = chunks.flatMap((chunk) =>
      chunk.choices[0]?.delta.content ? [chunk.choices[0].delta.content] : [],
    );
    expect(deltas).to.deep.equal(['Hello ', 'there, ', 'stand-in!']);
    expect(chunks[0]?.choices[0]?.delta.role).to.equal('assistant');
    expect(chunks.map((chunk) => chunk.choices[0]?.finish_reason ?? null).filter(Boolean)).to.deep.equal([
      'stop',
    ]);
    const last = chunks.at(-1);
    expect(last?.choices).to.deep.equal([]);
    // input: "You are a test." (4) + "Hello there, stand-in!" (3); output: 3 words
    expect(last?.usage).to.deep.include({ prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 });
    expect(new Set(chunks.map((chunk) => chunk.id)).size).to.equal(1);
    expect(chunks.every((chunk) => chunk.model === 'sigil-echo')).to.equal(true);
  });

  it('sends no usage chunk unless stream_options.include_usage asks for one', async () => {
    const chunks = await collect(
      await client.chat.completions.create({
        model: 'sigil-echo',
        messages: [{ role: 'user', content: 'no usage please' }],
        stream: true,
      }),
    );
    expect(chunks.some((chunk) => chunk.usage)).to.equal(false);
    expect(chunks.at(-1)?.choices[0]?.finish_reason).to.equal('stop');
  });

  it('answers without streaming too', async () => {
    const completion = await client.chat.completions.create({
      model: 'sigil-echo-mini',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'parts of text' }] }],
    });
    expect(completion.choices[0]?.message.content).to.equal('parts of text');
    expect(completion.choices[0]?.finish_reason).to.equal('stop');
    expect(completion.usage).to.deep.include({ prompt_tokens: 3, completion_tokens: 3 });
  });

  it('streams tool calls for "use tool <name> with {json}", arguments in fragments, in the order asked', async () => {
    const stream = client.chat.completions.stream({
      model: 'sigil-echo',
      messages: [
        {
          role: 'user',
          content: 'Please use tool get_weather with {"city":"Paris","unit":"C"} and use tool get_time too.',
        },
      ],
      tools,
      stream_options: { include_usage: true },
    });
    const argumentChunks: string[] = [];
    stream.on('chunk', (chunk) => {
      for (const call of chunk.choices[0]?.delta.tool_calls ?? [])
        if (call.function?.arguments) argumentChunks.push(call.function.arguments);
    });
    const completion = await stream.finalChatCompletion();
    const message = completion.choices[0]?.message;
    expect(completion.choices[0]?.finish_reason).to.equal('tool_calls');
    expect(message?.content ?? null).to.equal(null);
    const calls = (message?.tool_calls ?? []).map((call) =>
      call.type === 'function' ? [call.function.name, JSON.parse(call.function.arguments) as unknown] : [],
    );
    expect(calls).to.deep.equal([
      ['get_weather', { city: 'Paris', unit: 'C' }],
      ['get_time', {}],
    ]);
    expect(argumentChunks.length).to.be.greaterThan(2);
    expect(message?.tool_calls?.every((call) => /^call_[0-9a-f]{20}\d$/.test(call.id))).to.equal(true);
    // output: get_weather (1) + {"city":"Paris","unit":"C"} (1) + get_time (1) + {} (1)
    expect(completion.usage?.completion_tokens).to.equal(4);
  });

  it('ignores tools that are not offered, and answers the same request the same way', async () => {
    const request = {
      model: 'sigil-echo',
      messages: [{ role: 'user' as const, content: 'use tool launch_rockets with {"count":3}' }],
      tools,
    };
    const first = await client.chat.completions.create(request);
    expect(first.choices[0]?.message.content).to.equal('use tool launch_rockets with {"count":3}');
    const asked = { ...request, messages: [{ role: 'user' as const, content: 'use tool get_time' }] };
    const [a, b] = [await client.chat.completions.create(asked), await client.chat.completions.create(asked)];
    expect(a.choices[0]?.message.tool_calls).to.deep.equal(b.choices[0]?.message.tool_calls);
  });

  it('quotes each tool result in its answer after the results come back', async () => {
    const completion = await client.chat.completions.create({
      model: 'sigil-echo',
      messages: [
        { role: 'user', content: 'use tool get_weather with {"city":"Oslo"} and use tool get_time' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            {
              id: 'call_1',
              type: 'function',
              function: { name: 'get_weather', arguments: '{"city":"Oslo"}' },
            },
            { id: 'call_2', type: 'function', function: { name: 'get_time', arguments: '{}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: '{"celsius":-3}' },
        { role: 'tool', tool_call_id: 'call_2', content: '09:30' },
      ],
      tools,
    });
    expect(completion.choices[0]?.message.content).to.equal(
      'Tool get_weather returned: {"celsius":-3}\nTool get_time returned: 09:30',
    );
    expect(completion.choices[0]?.finish_reason).to.equal('stop');
    // 9 words of the user + get_weather {"city":"Oslo"} get_time {} (4) + 2 results
    expect(completion.usage?.prompt_tokens).to.equal(15);
  });

  it('cuts the text at max_tokens (or max_completion_tokens) words and finishes with length', async () => {
    const words = 'one two three four five six';
    const capped = await client.chat.completions.create({
      model: 'sigil-echo',
      messages: [{ role: 'user', content: words }],
      max_tokens: 4,
    });
    expect(capped.choices[0]?.message.content).to.equal('one two three four ');
    expect(capped.choices[0]?.finish_reason).to.equal('length');
    expect(capped.usage?.completion_tokens).to.equal(4);
    const newer = await client.chat.completions.create({
      model: 'sigil-echo',
      messages: [{ role: 'user', content: words }],
      max_completion_tokens: 2,
    });
    expect(newer.choices[0]?.message.content).to.equal('one two ');
  });

  it('refuses a missing key and keys starting with "invalid" with 401, quoting the key it got', async () => {
    let error: unknown;
    try {
      await clientWith('invalid-key-123').chat.completions.create({
        model: 'sigil-echo',
        messages: [{ role: 'user', content: 'hi' }],
      });
    } catch (err) {
      error = err;
    }
    expect(error).to.be.instanceOf(OpenAI.AuthenticationError);
    expect((error as InstanceType<typeof OpenAI.AuthenticationError>).code).to.equal('invalid_api_key');
    expect((error as Error).message).to.equal('401 Incorrect API key provided: invalid-key-123.');
    const bare = await fetch(`${standIn.url}/v1/chat/completions`, { method: 'POST', body: '{}' });
    expect(bare.status).to.equal(401);
  });

  it('takes only the configured keys when apiKeys is set, by bearer or x-api-key', async () => {
    const strict = await startStandIn({ apiKeys: ['sk-only-this'] });
    try {
      const body = JSON.stringify({ model: 'sigil-echo', messages: [{ role: 'user', content: 'hi' }] });
      const post = (headers: Record<string, string>) =>
        fetch(`${strict.url}/v1/chat/completions`, { method: 'POST', body, headers });
      expect((await post({ authorization: 'Bearer sk-only-this' })).status).to.equal(200);
      expect((await post({ 'x-api-key': 'sk-only-this' })).status).to.equal(200);
      expect((await post({ authorization: 'Bearer sk-any-other' })).status).to.equal(401);
    } finally {
      await strict.close();
    }
  });

  it('answers 429 with retry-after for sigil-rate-limited, 500 for sigil-error, 404 for an unknown model', async () => {
    const attempt = async (model: string) => {
      try {
        await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] });
      } catch (err) {
        return err as InstanceType<typeof OpenAI.APIError>;
      }
      throw new Error(`${model} answered`);
    };
    const limited = await attempt('sigil-rate-limited');
    expect(limited).to.be.instanceOf(OpenAI.RateLimitError);
    expect(limited.headers?.get('retry-after')).to.equal('1');
    expect(limited.code).to.equal('rate_limit_exceeded');
    expect(await attempt('sigil-error')).to.be.instanceOf(OpenAI.InternalServerError);
    const unknown = await attempt('gpt-nonexistent');
    expect(unknown).to.be.instanceOf(OpenAI.NotFoundError);
    expect(unknown.code).to.equal('model_not_found');
  });

  it('refuses what OpenAI refuses: a tool message without its call, a call left unanswered, bad JSON', async () => {
    const refused = async (messages: unknown[]) => {
      try {
        await client.chat.completions.create({ model: 'sigil-echo', messages: messages as never });
      } catch (err) {
        expect(err).to.be.instanceOf(OpenAI.BadRequestError);
        return (err as Error).message;
      }
      throw new Error('accepted');
    };
    expect(await refused([{ role: 'tool', tool_call_id: 'call_x', content: 'r' }])).to.match(
      /must be a response to a preceding message with 'tool_calls'/,
    );
    expect(
      await refused([
        { role: 'user', content: 'hi' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_time', arguments: '{}' } }],
        },
        { role: 'user', content: 'well?' },
      ]),
    ).to.match(/did not have response messages: call_1/);
    expect(await refused([])).to.match(/messages/);
    const raw = await fetch(`${standIn.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer sk-test' },
      body: '{not json',
    });
    expect(raw.status).to.equal(400);
  });

  it('lists its models in the OpenAI format', async () => {
    const ids: string[] = [];
    for await (const model of client.models.list()) ids.push(model.id);
    expect(ids).to.deep.equal([
      'sigil-echo',
      'sigil-echo-mini',
      'sigil-slow',
      'sigil-rate-limited',
      'sigil-error',
    ]);
    expect((await client.models.retrieve('sigil-slow')).owned_by).to.equal('sigil');
  });

  it('stops a stream whose client aborts, and counts it cancelled', async () => {
    const before = standIn.stats();
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      { model: 'sigil-slow', messages: [{ role: 'user', content: 'count' }], stream: true },
      { signal: controller.signal },
    );
    const seen: string[] = [];
    for await (const chunk of stream) {
      const text = chunk.choices[0]?.delta.content;
      if (text) seen.push(text);
      if (seen.length === 3) controller.abort();
    }
    expect(seen).to.deep.equal(['1 ', '2 ', '3 ']);
    const deadline = Date.now() + 2_000;
    while (standIn.stats().open > before.open && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    expect(standIn.stats()).to.deep.include({ open: before.open, cancelled: before.cancelled + 1 });
  });
});
