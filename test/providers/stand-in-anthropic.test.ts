import Anthropic from '@anthropic-ai/sdk';
import type { RawMessageStreamEvent, Tool } from '@anthropic-ai/sdk/resources/messages';
import { expect } from 'chai';
import { startStandIn, type StandIn } from '../../providers/local/index.ts';

/**
 * The local stand-in driven by the official `@anthropic-ai/sdk`, as any Anthropic client would: the
 * Messages wire format, streaming and not, tool_use blocks, usage, errors and models.
 */

const tools: Tool[] = [
  { name: 'get_weather', description: 'Weather in a city', input_schema: { type: 'object' } },
  { name: 'get_time', description: 'Time in a city', input_schema: { type: 'object' } },
];

describe('local stand-in, Anthropic wire (@anthropic-ai/sdk)', function () {
  this.timeout(30_000);
  let standIn: StandIn;
  let client: Anthropic;
  const clientWith = (apiKey: string) =>
    new Anthropic({ apiKey, baseURL: standIn.url, maxRetries: 0, logLevel: 'off', openTelemetry: false });

  before(async () => {
    standIn = await startStandIn({ slowDelayMs: 20 });
    client = clientWith('sk-ant-test');
  });
  after(() => standIn.close());

  it('streams the echo as SSE events: message_start, a text block of text_deltas, message_delta, message_stop', async () => {
    const events: RawMessageStreamEvent[] = [];
    const stream = await client.messages.create({
      model: 'sigil-echo',
      max_tokens: 100,
      system: 'You are a test.',
      messages: [{ role: 'user', content: 'Hello there, stand-in!' }],
      stream: true,
    });
    for await (const event of stream) events.push(event);
    expect(events.map((event) => event.type)).to.deep.equal([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    const start = events[0] as Extract<RawMessageStreamEvent, { type: 'message_start' }>;
    // input: "You are a test." (4) + the message (3)
    expect(start.message.usage).to.deep.include({ input_tokens: 7, output_tokens: 0 });
    const texts = events.flatMap((event) =>
      event.type === 'content_block_delta' && event.delta.type === 'text_delta' ? [event.delta.text] : [],
    );
    expect(texts).to.deep.equal(['Hello ', 'there, ', 'stand-in!']);
    const delta = events[6] as Extract<RawMessageStreamEvent, { type: 'message_delta' }>;
    expect(delta.delta.stop_reason).to.equal('end_turn');
    expect(delta.usage.output_tokens).to.equal(3);
  });

  it('gives the stream helper a final message with the text and usage', async () => {
    const stream = client.messages.stream({
      model: 'sigil-echo-mini',
      max_tokens: 100,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'two words' }] }],
    });
    let streamed = '';
    stream.on('text', (text) => (streamed += text));
    const message = await stream.finalMessage();
    expect(streamed).to.equal('two words');
    expect(message.content).to.have.length(1);
    expect(message.content[0]).to.deep.include({ type: 'text', text: 'two words' });
    expect(message.stop_reason).to.equal('end_turn');
    expect(message.usage).to.deep.include({ input_tokens: 2, output_tokens: 2 });
  });

  it('streams tool_use blocks with input_json_delta fragments that the SDK parses into inputs', async () => {
    const stream = client.messages.stream({
      model: 'sigil-echo',
      max_tokens: 100,
      messages: [
        {
          role: 'user',
          content: 'Please use tool get_weather with {"city":"Paris","unit":"C"} and use tool get_time too.',
        },
      ],
      tools,
    });
    const fragments: string[] = [];
    stream.on('inputJson', (partial) => fragments.push(partial));
    const message = await stream.finalMessage();
    expect(message.stop_reason).to.equal('tool_use');
    const uses = message.content.flatMap((block) =>
      block.type === 'tool_use' ? [[block.name, block.input]] : [],
    );
    expect(uses).to.deep.equal([
      ['get_weather', { city: 'Paris', unit: 'C' }],
      ['get_time', {}],
    ]);
    expect(message.content.some((block) => block.type === 'text')).to.equal(false);
    expect(fragments.length).to.be.greaterThan(2);
    expect(
      message.content.every((block) => block.type !== 'tool_use' || /^toolu_[0-9a-f]{20}\d$/.test(block.id)),
    ).to.equal(true);
    expect(message.usage.output_tokens).to.equal(4);
  });

  it('quotes tool results (and says when one failed) in the answer after them', async () => {
    const message = await client.messages.create({
      model: 'sigil-echo',
      max_tokens: 100,
      tools,
      messages: [
        { role: 'user', content: 'use tool get_weather with {"city":"Oslo"} and use tool get_time' },
        {
          role: 'assistant',
          content: [
            { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Oslo' } },
            { type: 'tool_use', id: 'toolu_2', name: 'get_time', input: {} },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_1', content: '{"celsius":-3}' },
            {
              type: 'tool_result',
              tool_use_id: 'toolu_2',
              content: [{ type: 'text', text: 'no clock' }],
              is_error: true,
            },
          ],
        },
      ],
    });
    expect(message.content[0]).to.deep.include({
      type: 'text',
      text: 'Tool get_weather returned: {"celsius":-3}\nTool get_time failed: no clock',
    });
    expect(message.stop_reason).to.equal('end_turn');
  });

  it('cuts the text at max_tokens words with stop_reason max_tokens', async () => {
    const message = await client.messages.create({
      model: 'sigil-echo',
      max_tokens: 2,
      messages: [{ role: 'user', content: 'one two three four' }],
    });
    expect(message.content[0]).to.deep.include({ text: 'one two ' });
    expect(message.stop_reason).to.equal('max_tokens');
    expect(message.usage.output_tokens).to.equal(2);
  });

  it('refuses a bad key with authentication_error, by the SDK’s bearer header or x-api-key', async () => {
    let error: unknown;
    try {
      await clientWith('invalid-ant-key').messages.create({
        model: 'sigil-echo',
        max_tokens: 10,
        messages: [{ role: 'user', content: 'hi' }],
      });
    } catch (err) {
      error = err;
    }
    expect(error).to.be.instanceOf(Anthropic.AuthenticationError);
    expect((error as InstanceType<typeof Anthropic.APIError>).type).to.equal('authentication_error');
    const body = JSON.stringify({
      model: 'sigil-echo',
      max_tokens: 5,
      messages: [{ role: 'user', content: 'hi' }],
    });
    const post = (key: string) =>
      fetch(`${standIn.url}/v1/messages`, {
        method: 'POST',
        headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01' },
        body,
      });
    expect((await post('sk-ant-good')).status).to.equal(200);
    const refused = await post('invalid-one');
    expect(refused.status).to.equal(401);
    expect(await refused.json()).to.deep.equal({
      type: 'error',
      error: { type: 'authentication_error', message: 'Incorrect API key provided: invalid-one.' },
    });
  });

  it('answers rate_limit_error 429, api_error 500 and not_found_error 404 as Anthropic does', async () => {
    const attempt = async (model: string) => {
      try {
        await client.messages.create({ model, max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });
      } catch (err) {
        return err as InstanceType<typeof Anthropic.APIError>;
      }
      throw new Error(`${model} answered`);
    };
    const limited = await attempt('sigil-rate-limited');
    expect(limited).to.be.instanceOf(Anthropic.RateLimitError);
    expect(limited.type).to.equal('rate_limit_error');
    expect(limited.headers?.get('retry-after')).to.equal('1');
    expect((await attempt('sigil-error')).type).to.equal('api_error');
    expect(await attempt('claude-nonexistent')).to.be.instanceOf(Anthropic.NotFoundError);
  });

  it('refuses what Anthropic refuses: no max_tokens, a tool_result without its tool_use, a tool_use unanswered', async () => {
    const refused = async (body: Record<string, unknown>) => {
      try {
        await client.messages.create({ model: 'sigil-echo', max_tokens: 10, ...body } as never);
      } catch (err) {
        expect(err).to.be.instanceOf(Anthropic.BadRequestError);
        return (err as InstanceType<typeof Anthropic.APIError>).apiMessage ?? '';
      }
      throw new Error('accepted');
    };
    expect(await refused({ max_tokens: undefined, messages: [{ role: 'user', content: 'hi' }] })).to.match(
      /^max_tokens: /,
    );
    expect(
      await refused({
        messages: [
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_x', content: 'r' }] },
        ],
      }),
    ).to.match(/unexpected tool_use_id found in tool_result blocks: toolu_x/);
    expect(
      await refused({
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_time', input: {} }] },
          { role: 'user', content: 'well?' },
        ],
      }),
    ).to.match(/tool_use ids were found without tool_result blocks immediately after: toolu_1/);
  });

  it('lists its models in the Anthropic format', async () => {
    const ids: string[] = [];
    for await (const model of client.models.list()) ids.push(model.id);
    expect(ids).to.deep.equal([
      'sigil-echo',
      'sigil-echo-mini',
      'sigil-slow',
      'sigil-rate-limited',
      'sigil-error',
    ]);
    expect(await client.models.retrieve('sigil-echo')).to.deep.include({
      type: 'model',
      display_name: 'sigil-echo',
    });
  });

  it('stops a stream whose client aborts, and counts it cancelled', async () => {
    const before = standIn.stats();
    const stream = client.messages.stream({
      model: 'sigil-slow',
      max_tokens: 5000,
      messages: [{ role: 'user', content: 'count' }],
    });
    const seen: string[] = [];
    stream.on('text', (text) => {
      seen.push(text);
      if (seen.length === 3) stream.abort();
    });
    let aborted: unknown;
    try {
      await stream.done();
    } catch (err) {
      aborted = err;
    }
    expect(aborted).to.be.instanceOf(Anthropic.APIUserAbortError);
    expect(seen).to.deep.equal(['1 ', '2 ', '3 ']);
    const deadline = Date.now() + 2_000;
    while (standIn.stats().open > before.open && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10));
    expect(standIn.stats()).to.deep.include({ open: before.open, cancelled: before.cancelled + 1 });
  });
});
