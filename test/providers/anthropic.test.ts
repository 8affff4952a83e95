import { expect } from 'chai';
import { type LlmChatRequest, LlmProviderError, type LlmProviderV1 } from '@sigil/plugin-api';
import { ANTHROPIC_MODELS } from '../../providers/anthropic/catalog.ts';
import anthropic from '../../providers/anthropic/index.ts';
import { toAnthropicMessages } from '../../providers/anthropic/messages.ts';
import { quietLogger } from '../support/kernel.ts';
import { drain, rawUpstream, sse, type RawUpstream } from './support.ts';

/** provider-anthropic: its options, what it sends, and the odd upstreams the kit does not cover. */

const create = async (options: Record<string, unknown>) =>
  (await anthropic.create({
    config: anthropic.config.parse(options),
    deps: {},
    logger: quietLogger(),
  })) as LlmProviderV1;

const hello: Pick<LlmChatRequest, 'model' | 'apiKey' | 'messages'> = {
  model: 'claude-test',
  apiKey: 'sk-ant-raw-upstream-key',
  messages: [{ role: 'user', content: 'hello' }],
};

const start = (usage: Record<string, unknown>) => [
  'message_start',
  {
    type: 'message_start',
    message: {
      id: 'msg_1',
      type: 'message',
      role: 'assistant',
      model: 'claude-test',
      content: [],
      stop_reason: null,
      usage: {
        input_tokens: 10,
        output_tokens: 1,
        cache_creation_input_tokens: null,
        cache_read_input_tokens: null,
        ...usage,
      },
    },
  },
];
const text = (value: string) => [
  [
    'content_block_start',
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
  ],
  [
    'content_block_delta',
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: value } },
  ],
  ['content_block_stop', { type: 'content_block_stop', index: 0 }],
];
const end = (stopReason: string, usage: Record<string, unknown>) => [
  [
    'message_delta',
    {
      type: 'message_delta',
      delta: { stop_reason: stopReason, stop_sequence: null },
      usage: {
        input_tokens: null,
        cache_creation_input_tokens: null,
        cache_read_input_tokens: null,
        ...usage,
      },
    },
  ],
  ['message_stop', { type: 'message_stop' }],
];

describe('provider-anthropic', function () {
  this.timeout(30_000);
  let upstream: RawUpstream | undefined;
  afterEach(async () => {
    await upstream?.close();
    upstream = undefined;
  });

  it('defaults to Anthropic: its URL, its models and prices, 4096 max tokens, no SDK retries', () => {
    const config = anthropic.config.parse({});
    expect(config).to.deep.include({
      baseURL: 'https://api.anthropic.com',
      defaultMaxTokens: 4096,
      maxRetries: 0,
    });
    expect(config.models).to.deep.equal(ANTHROPIC_MODELS);
    expect(config.models.find((model) => model.id === 'claude-sonnet-4-5')).to.deep.include({
      inputPricePerMTok: 3_000_000n,
      outputPricePerMTok: 15_000_000n,
    });
  });

  it('puts system messages in system, and each tool result in the user message after the tool_use', () => {
    expect(
      toAnthropicMessages([
        { role: 'system', content: 'one' },
        { role: 'user', content: 'ask' },
        {
          role: 'assistant',
          content: 'calling',
          toolCalls: [
            { id: 't1', name: 'a', input: {} },
            { id: 't2', name: 'b', input: { x: 1 } },
          ],
        },
        { role: 'tool', toolCallId: 't1', content: 'r1' },
        { role: 'tool', toolCallId: 't2', content: 'oops', isError: true },
        { role: 'user', content: 'and?' },
        { role: 'assistant', content: '' },
        { role: 'system', content: 'two' },
      ]),
    ).to.deep.equal({
      system: 'one\n\ntwo',
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'ask' }] },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'calling' },
            { type: 'tool_use', id: 't1', name: 'a', input: {} },
            { type: 'tool_use', id: 't2', name: 'b', input: { x: 1 } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 't1', content: 'r1' },
            { type: 'tool_result', tool_use_id: 't2', content: 'oops', is_error: true },
            { type: 'text', text: 'and?' },
          ],
        },
      ],
    });
  });

  it('sends the Messages request with the default max_tokens and tools, and sums cache tokens into input', async () => {
    upstream = await rawUpstream((res) =>
      sse(res, [
        start({ input_tokens: 10, cache_read_input_tokens: 100 }),
        ['ping', { type: 'ping' }],
        ...text('hi'),
        ...end('end_turn', { output_tokens: 7, input_tokens: 12, cache_read_input_tokens: 100 }),
      ]),
    );
    const provider = await create({ baseURL: upstream.url, defaultMaxTokens: 321 });
    const { parts, error } = await drain(
      provider.doStream({
        ...hello,
        tools: [{ name: 'f', description: 'F', inputSchema: { properties: {} } }],
      }),
    );
    expect(error).to.equal(undefined);
    expect(parts).to.deep.equal([
      { type: 'text-delta', text: 'hi' },
      { type: 'usage', inputTokens: 112, outputTokens: 7 },
      { type: 'finish', reason: 'stop' },
    ]);
    const [sent] = upstream.requests;
    expect(sent?.path).to.equal('/v1/messages');
    expect([sent?.headers['x-api-key'], sent?.headers.authorization]).to.include.oneOf([
      'sk-ant-raw-upstream-key',
      'Bearer sk-ant-raw-upstream-key',
    ]);
    expect(sent?.headers['anthropic-version']).to.be.a('string');
    expect(sent?.body).to.deep.equal({
      model: 'claude-test',
      max_tokens: 321,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'hello' }] }],
      stream: true,
      tools: [{ name: 'f', description: 'F', input_schema: { type: 'object', properties: {} } }],
    });
  });

  it('maps refusal to finish error and max_tokens to length', async () => {
    upstream = await rawUpstream((res, body) =>
      sse(res, [
        start({}),
        ...text('no'),
        ...end(body.max_tokens === 1 ? 'max_tokens' : 'refusal', { output_tokens: 1 }),
      ]),
    );
    const provider = await create({ baseURL: upstream.url });
    expect((await drain(provider.doStream(hello))).parts.at(-1)).to.deep.equal({
      type: 'finish',
      reason: 'error',
    });
    expect((await drain(provider.doStream({ ...hello, maxOutputTokens: 1 }))).parts.at(-1)).to.deep.equal({
      type: 'finish',
      reason: 'length',
    });
  });

  it('types errors sent inside the stream by their error type: overloaded upstream, rate limit', async () => {
    upstream = await rawUpstream((res, body) =>
      sse(res, [
        start({}),
        ...text('partial'),
        [
          'error',
          {
            type: 'error',
            error:
              body.model === 'limited'
                ? { type: 'rate_limit_error', message: 'slow down' }
                : { type: 'overloaded_error', message: 'Overloaded' },
          },
        ],
      ]),
    );
    const provider = await create({ baseURL: upstream.url });
    const overloaded = await drain(provider.doStream(hello));
    expect(overloaded.parts).to.deep.equal([{ type: 'text-delta', text: 'partial' }]);
    expect(overloaded.error).to.be.instanceOf(LlmProviderError).and.deep.include({
      kind: 'upstream',
      retryable: true,
      upstreamCode: 'overloaded_error',
    });
    expect((overloaded.error as Error).message).to.equal('anthropic: Overloaded');
    const limited = await drain(provider.doStream({ ...hello, model: 'limited' }));
    expect(limited.error).to.be.instanceOf(LlmProviderError).and.include({ kind: 'rate_limit' });
  });

  it('fails a stream that ends before message_stop, and tool input that is not a JSON object', async () => {
    upstream = await rawUpstream((res, body) =>
      sse(
        res,
        body.model === 'tool'
          ? [
              start({}),
              [
                'content_block_start',
                {
                  type: 'content_block_start',
                  index: 0,
                  content_block: { type: 'tool_use', id: 'toolu_1', name: 'f', input: {} },
                },
              ],
              [
                'content_block_delta',
                {
                  type: 'content_block_delta',
                  index: 0,
                  delta: { type: 'input_json_delta', partial_json: '"text"' },
                },
              ],
              ['content_block_stop', { type: 'content_block_stop', index: 0 }],
            ]
          : [start({}), ...text('cut')],
      ),
    );
    const provider = await create({ baseURL: upstream.url });
    const cut = await drain(provider.doStream(hello));
    expect((cut.error as Error).message).to.equal('anthropic: the stream ended before the model finished');
    const tool = await drain(provider.doStream({ ...hello, model: 'tool' }));
    expect((tool.error as Error).message).to.equal(
      'anthropic: the model called f with arguments that are not a JSON object',
    );
  });
});
