import { expect } from 'chai';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { LlmProviderError, type LlmStreamPart } from '@sigil/plugin-api';
import local, { LOCAL_MODELS, type LocalProvider } from '../../providers/local/index.ts';
import { countTokens, reply, requestedToolCalls } from '@sigil/plugin-api/llm/stand-in';
import { quietLogger } from '../support/kernel.ts';
import { freePort } from '../support/cli.ts';

/** The provider-local plugin: its lifecycle, and the stand-in's deterministic rules through it. */

const create = async (options: Record<string, unknown> = {}, logger = quietLogger()) =>
  (await local.create({ config: local.config.parse(options), deps: { logger }, logger })) as LocalProvider;

async function parts(stream: AsyncIterable<LlmStreamPart>): Promise<LlmStreamPart[]> {
  const out: LlmStreamPart[] = [];
  for await (const part of stream) out.push(part);
  return out;
}

describe('provider-local', function () {
  this.timeout(30_000);

  it('serves its stand-in between start() and stop(), on the configured port', async () => {
    const port = await freePort();
    const provider = await create({ port });
    expect(provider.standIn).to.equal(undefined);
    await provider.start();
    expect(provider.standIn?.url).to.equal(`http://127.0.0.1:${port}`);
    const health = await fetch(`http://127.0.0.1:${port}/health`);
    expect(await health.json()).to.deep.equal({ status: 'ok' });
    await provider.stop();
    expect(provider.standIn).to.equal(undefined);
    let refused: unknown;
    await fetch(`http://127.0.0.1:${port}/health`).catch((err: unknown) => (refused = err));
    expect(refused).to.be.instanceOf(Error);
  });

  it('picks a free port with port 0, one per instance, and says where in its log', async () => {
    const lines: string[] = [];
    const logger = pino(
      { level: 'info' },
      new Writable({
        write: (chunk: Buffer, _encoding, done) => {
          lines.push(chunk.toString());
          done();
        },
      }),
    );
    const [a, b] = [await create({}, logger), await create({}, logger)];
    await Promise.all([a.start(), b.start()]);
    try {
      expect(a.standIn?.port).to.be.greaterThan(0);
      expect(a.standIn?.port).to.not.equal(b.standIn?.port);
      expect(lines.join('')).to.include(a.standIn?.url);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
  });

  it('streams from its stand-in: the echo, word counts as usage, and the local catalog', async () => {
    const provider = await create();
    await provider.start();
    try {
      expect(await provider.listModels()).to.deep.equal(LOCAL_MODELS);
      expect(provider.keySlot).to.equal('PROVIDER_API_KEY');
      const got = await parts(
        provider.doStream({
          model: 'sigil-echo',
          apiKey: 'sk-any',
          messages: [
            { role: 'system', content: 'Be brief.' },
            { role: 'user', content: 'ping pong' },
          ],
        }),
      );
      expect(got).to.deep.equal([
        { type: 'text-delta', text: 'ping ' },
        { type: 'text-delta', text: 'pong' },
        { type: 'usage', inputTokens: 4, outputTokens: 2 },
        { type: 'finish', reason: 'stop' },
      ]);
    } finally {
      await provider.stop();
    }
  });

  it('takes only the configured apiKeys when set', async () => {
    const provider = await create({ apiKeys: ['sk-configured-1'] });
    await provider.start();
    try {
      const request = { model: 'sigil-echo', messages: [{ role: 'user' as const, content: 'hi' }] };
      expect(
        (await parts(provider.doStream({ ...request, apiKey: 'sk-configured-1' }))).at(-1),
      ).to.deep.equal({
        type: 'finish',
        reason: 'stop',
      });
      let error: unknown;
      await parts(provider.doStream({ ...request, apiKey: 'sk-other' })).catch(
        (err: unknown) => (error = err),
      );
      expect(error).to.be.instanceOf(LlmProviderError).and.include({ kind: 'auth', status: 401 });
      expect((error as Error).message).to.equal(
        'local answered 401: Incorrect API key provided: [REDACTED].',
      );
    } finally {
      await provider.stop();
    }
  });

  it('fails as upstream, retryable, when not started', async () => {
    const provider = await create();
    let error: unknown;
    await parts(
      provider.doStream({ model: 'sigil-echo', apiKey: 'k', messages: [{ role: 'user', content: 'hi' }] }),
    ).catch((err: unknown) => (error = err));
    expect(error).to.be.instanceOf(LlmProviderError).and.include({ kind: 'upstream', retryable: true });
  });

  it('refuses bad options: a port out of range, an empty key list, unknown options', () => {
    expect(local.config.safeParse({ port: 70000 }).success).to.equal(false);
    expect(local.config.safeParse({ apiKeys: [] }).success).to.equal(false);
    expect(local.config.safeParse({ model: 'x' }).success).to.equal(false);
  });
});

describe('the stand-in’s deterministic rules (@sigil/plugin-api/llm/stand-in)', () => {
  it('counts a token per run of non-whitespace characters', () => {
    expect(countTokens('')).to.equal(0);
    expect(countTokens('  one\ttwo\n three  ')).to.equal(3);
    expect(countTokens('{"a":"b c"}')).to.equal(2);
  });

  it('finds "use tool <name> [with {json}]" for offered tools only, nested JSON included', () => {
    expect(
      requestedToolCalls(
        'Use tool a with {"x":{"y":"}"},"z":[1]} then use tool b with nonsense, use tool c',
        ['a', 'b'],
      ),
    ).to.deep.equal([
      { name: 'a', input: { x: { y: '}' }, z: [1] } },
      { name: 'b', input: {} },
    ]);
    expect(requestedToolCalls('use tool a with {broken', ['a'])).to.deep.equal([{ name: 'a', input: {} }]);
  });

  it('echoes, counts to 1000 for sigil-slow, and says "(empty message)" to an empty one', () => {
    const turns = [{ role: 'user' as const, text: '' }];
    expect(reply('sigil-echo', turns, []).deltas.join('')).to.equal('(empty message)');
    const slow = reply('sigil-slow', [{ role: 'user', text: 'use tool a' }], ['a']);
    expect(slow.toolCalls).to.deep.equal([]);
    expect(slow.deltas).to.have.length(1000);
    expect(slow.deltas.slice(0, 2)).to.deep.equal(['1 ', '2 ']);
    expect(slow.deltas.at(-1)).to.equal('1000');
  });
});
