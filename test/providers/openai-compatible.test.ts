import { expect } from 'chai';
import { type LlmChatRequest, LlmProviderError, type LlmProviderV1 } from '@sigil/plugin-api';
import { startStandIn, type StandIn } from '../../providers/local/index.ts';
import { OPENAI_MODELS } from '../../providers/openai-compatible/catalog.ts';
import openAiCompatible from '../../providers/openai-compatible/index.ts';
import { quietLogger } from '../support/kernel.ts';
import { drain, rawUpstream, sse, type RawUpstream } from './support.ts';

/** provider-openai-compatible: its options, what it sends, and the odd upstreams the kit does not cover. */

const create = async (options: Record<string, unknown>) =>
  (await openAiCompatible.create({
    config: openAiCompatible.config.parse(options),
    deps: {},
    logger: quietLogger(),
  })) as LlmProviderV1;

const chunk = (delta: Record<string, unknown>, finish: string | null = null) => ({
  id: 'c1',
  object: 'chat.completion.chunk',
  created: 1,
  model: 'm',
  choices: [{ index: 0, delta, finish_reason: finish }],
});

const hello: Pick<LlmChatRequest, 'model' | 'apiKey' | 'messages'> = {
  model: 'm',
  apiKey: 'sk-raw-upstream-key',
  messages: [{ role: 'user', content: 'hello' }],
};

describe('provider-openai-compatible', function () {
  this.timeout(30_000);
  let upstream: RawUpstream | undefined;
  afterEach(async () => {
    await upstream?.close();
    upstream = undefined;
  });

  it('defaults to OpenAI: its URL, its models and prices, no SDK retries, max_tokens', () => {
    const config = openAiCompatible.config.parse({});
    expect(config).to.deep.include({
      baseURL: 'https://api.openai.com/v1',
      maxRetries: 0,
      timeoutMs: 600_000,
      maxTokensParameter: 'max_tokens',
    });
    expect(config.models).to.deep.equal(OPENAI_MODELS);
    expect(config.models.find((model) => model.id === 'gpt-4o-mini')).to.deep.include({
      inputPricePerMTok: 150_000n,
      outputPricePerMTok: 600_000n,
    });
    expect(openAiCompatible.config.safeParse({ baseURL: 'ftp://example.com' }).success).to.equal(false);
    expect(
      openAiCompatible.config.safeParse({
        models: [{ id: 'x', inputPricePerMTok: 0.5, outputPricePerMTok: 1 }],
      }).success,
    ).to.equal(false);
  });

  it('sends the Chat Completions request: messages, tool calls and results, tools, usage asked, the key as bearer', async () => {
    upstream = await rawUpstream((res) =>
      sse(res, [
        chunk({ role: 'assistant', content: 'ok' }),
        chunk({}, 'stop'),
        { ...chunk({}), choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } },
        '[DONE]',
      ]),
    );
    const saved = { org: process.env.OPENAI_ORG_ID, project: process.env.OPENAI_PROJECT_ID };
    process.env.OPENAI_ORG_ID = 'org-of-the-operator';
    process.env.OPENAI_PROJECT_ID = 'proj-of-the-operator';
    try {
      const provider = await create({
        baseURL: `${upstream.url}/v1`,
        maxTokensParameter: 'max_completion_tokens',
      });
      const { parts, error } = await drain(
        provider.doStream({
          ...hello,
          maxOutputTokens: 99,
          messages: [
            { role: 'system', content: 'sys' },
            { role: 'user', content: 'u1' },
            { role: 'assistant', content: '', toolCalls: [{ id: 'call_a', name: 'f', input: { x: 1 } }] },
            { role: 'tool', toolCallId: 'call_a', content: '{"r":2}' },
            { role: 'assistant', content: 'done' },
          ],
          tools: [{ name: 'f', description: 'F', inputSchema: { type: 'object' } }],
        }),
      );
      expect(error).to.equal(undefined);
      expect(parts.at(-1)).to.deep.equal({ type: 'finish', reason: 'stop' });
    } finally {
      if (saved.org === undefined) delete process.env.OPENAI_ORG_ID;
      else process.env.OPENAI_ORG_ID = saved.org;
      if (saved.project === undefined) delete process.env.OPENAI_PROJECT_ID;
      else process.env.OPENAI_PROJECT_ID = saved.project;
    }
    const [sent] = upstream.requests;
    expect(sent?.path).to.equal('/v1/chat/completions');
    expect(sent?.headers.authorization).to.equal('Bearer sk-raw-upstream-key');
    expect(sent?.headers['openai-organization']).to.equal(undefined);
    expect(sent?.headers['openai-project']).to.equal(undefined);
    expect(sent?.body).to.deep.equal({
      model: 'm',
      messages: [
        { role: 'system', content: 'sys' },
        { role: 'user', content: 'u1' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'f', arguments: '{"x":1}' } }],
        },
        { role: 'tool', tool_call_id: 'call_a', content: '{"r":2}' },
        { role: 'assistant', content: 'done' },
      ],
      stream: true,
      stream_options: { include_usage: true },
      tools: [
        { type: 'function', function: { name: 'f', description: 'F', parameters: { type: 'object' } } },
      ],
      max_completion_tokens: 99,
    });
  });

  it('estimates usage (4 characters a token, rounded up) when the upstream reports none', async () => {
    upstream = await rawUpstream((res) =>
      sse(res, [chunk({ role: 'assistant', content: 'twelve chars' }), chunk({}, 'stop'), '[DONE]']),
    );
    const { parts } = await drain((await create({ baseURL: `${upstream.url}/v1` })).doStream(hello));
    const sent = JSON.stringify({ messages: hello.messages, tools: [] });
    expect(parts.slice(-2)).to.deep.equal([
      { type: 'usage', inputTokens: Math.ceil(sent.length / 4), outputTokens: 3, estimated: true },
      { type: 'finish', reason: 'stop' },
    ]);
  });

  it('maps content_filter to finish error, and fails a stream that ends before a finish reason', async () => {
    upstream = await rawUpstream((res, body) =>
      sse(
        res,
        (body.messages as { content: string }[])[0]?.content === 'filtered'
          ? [chunk({ content: 'a' }), chunk({}, 'content_filter'), '[DONE]']
          : [chunk({ content: 'cut short' })],
      ),
    );
    const provider = await create({ baseURL: `${upstream.url}/v1` });
    const filtered = await drain(
      provider.doStream({ ...hello, messages: [{ role: 'user', content: 'filtered' }] }),
    );
    expect(filtered.parts.at(-1)).to.deep.equal({ type: 'finish', reason: 'error' });
    const cut = await drain(provider.doStream(hello));
    expect(cut.parts).to.deep.equal([{ type: 'text-delta', text: 'cut short' }]);
    expect(cut.error).to.be.instanceOf(LlmProviderError).and.include({ kind: 'upstream', retryable: true });
    expect((cut.error as Error).message).to.equal(
      'openai-compatible: the stream ended before the model finished',
    );
  });

  it('fails as upstream when the model writes tool arguments that are not a JSON object', async () => {
    upstream = await rawUpstream((res) =>
      sse(res, [
        chunk({
          tool_calls: [
            { index: 0, id: 'call_1', type: 'function', function: { name: 'f', arguments: '[1,' } },
          ],
        }),
        chunk({ tool_calls: [{ index: 0, function: { arguments: '2]' } }] }),
        chunk({}, 'tool_calls'),
        '[DONE]',
      ]),
    );
    const { error } = await drain((await create({ baseURL: `${upstream.url}/v1` })).doStream(hello));
    expect(error).to.be.instanceOf(LlmProviderError).and.include({ kind: 'upstream' });
    expect((error as Error).message).to.equal(
      'openai-compatible: the model called f with arguments that are not a JSON object',
    );
  });

  it('says upstream, retryable, when the server cannot be reached', async () => {
    upstream = await rawUpstream(() => undefined);
    const url = upstream.url;
    await upstream.close();
    upstream = undefined;
    const { error } = await drain((await create({ baseURL: `${url}/v1` })).doStream(hello));
    expect(error).to.be.instanceOf(LlmProviderError).and.deep.include({ kind: 'upstream', retryable: true });
    expect((error as Error).message).to.equal('openai-compatible: cannot reach the server');
  });

  describe('against the stand-in', () => {
    let standIn: StandIn;
    before(async () => {
      standIn = await startStandIn();
    });
    after(() => standIn.close());

    it('carries the status, the upstream code and retry-after on a 429', async () => {
      const provider = await create({ baseURL: `${standIn.url}/v1` });
      const { error } = await drain(provider.doStream({ ...hello, model: 'sigil-rate-limited' }));
      expect(error).to.be.instanceOf(LlmProviderError).and.deep.include({
        kind: 'rate_limit',
        retryable: true,
        status: 429,
        retryAfterMs: 1000,
        upstreamCode: 'rate_limit_exceeded',
      });
      expect((error as Error).message).to.equal(
        "openai-compatible answered 429: Rate limit reached for sigil-rate-limited (the stand-in's rate-limited model).",
      );
    });

    it('lets the SDK retry when maxRetries is set', async () => {
      const provider = await create({ baseURL: `${standIn.url}/v1`, maxRetries: 1 });
      const before = standIn.stats().served;
      const { error } = await drain(provider.doStream({ ...hello, model: 'sigil-error' }));
      expect(error).to.be.instanceOf(LlmProviderError).and.include({ kind: 'upstream', status: 500 });
      expect(standIn.stats().served - before).to.equal(2);
    });
  });
});
