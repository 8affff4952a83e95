import { expect } from 'chai';
import {
  type LlmChatRequest,
  LlmProviderError,
  type LlmProviderV1,
  type LlmStreamPart,
} from '@sigil/plugin-api';
import {
  contractChecks,
  describeLlmProviderBehaviour,
  EvidenceRedactor,
  llmProviderBehaviour,
  llmProviderKit,
  runChecks,
  type CheckResult,
  type LlmProviderHarness,
} from '@sigil/plugin-api/kit';
import anthropic from '../../providers/anthropic/index.ts';
import local, { startStandIn, type LocalProvider, type StandIn } from '../../providers/local/index.ts';
import openAiCompatible from '../../providers/openai-compatible/index.ts';
import { quietLogger } from '../support/kernel.ts';

/**
 * The llm-provider kit, shape and behaviour, on the three providers Sigil ships: openai-compatible
 * and anthropic through their real SDKs against the local stand-in, and the local provider itself.
 */

const API_KEY = 'sk-sigil-kit-good-key-0123456789';
const standInHarness = (standIn: () => StandIn): LlmProviderHarness => ({
  model: 'sigil-echo',
  apiKey: API_KEY,
  rateLimited: { model: 'sigil-rate-limited' },
  upstreamError: { model: 'sigil-error' },
  slow: { model: 'sigil-slow' },
  openUpstreamRequests: () => standIn().stats().open,
});

describe('llm-provider kit on the shipped providers', function () {
  this.timeout(120_000);
  let standIn: StandIn | undefined;
  const running = () => {
    if (!standIn) throw new Error('the stand-in is not started');
    return standIn;
  };
  before(async () => {
    standIn = await startStandIn();
  });
  after(async () => {
    await standIn?.close();
    standIn = undefined;
  });

  describe('provider-openai-compatible → stand-in (openai SDK)', () => {
    describeLlmProviderBehaviour(
      async () =>
        (await openAiCompatible.create({
          config: openAiCompatible.config.parse({
            baseURL: `${running().url}/v1`,
            models: [{ id: 'sigil-echo', inputPricePerMTok: 1_000_000, outputPricePerMTok: '2000000' }],
          }),
          deps: {},
          logger: quietLogger(),
        })) as LlmProviderV1,
      () => standInHarness(running),
    );
  });

  describe('provider-anthropic → stand-in (@anthropic-ai/sdk)', () => {
    describeLlmProviderBehaviour(
      async () =>
        (await anthropic.create({
          config: anthropic.config.parse({
            baseURL: running().url,
            models: [{ id: 'sigil-echo', inputPricePerMTok: 1_000_000, outputPricePerMTok: 2_000_000 }],
          }),
          deps: {},
          logger: quietLogger(),
        })) as LlmProviderV1,
      () => standInHarness(running),
    );
  });

  describe('provider-local (its own stand-in)', () => {
    describeLlmProviderBehaviour(
      async () => {
        const instance = (await local.create({
          config: local.config.parse({}),
          deps: { logger: quietLogger() },
          logger: quietLogger(),
        })) as LocalProvider;
        await instance.start();
        return instance;
      },
      () => ({
        ...standInHarness(running),
        openUpstreamRequests: (instance) => (instance as LocalProvider).standIn?.stats().open ?? 0,
      }),
    );
  });
});

describe('llm-provider kit against providers broken on purpose', function () {
  this.timeout(120_000);
  let standIn: StandIn | undefined;
  const running = () => {
    if (!standIn) throw new Error('the stand-in is not started');
    return standIn;
  };
  // sigil-slow counts to 1000 in about 5 s here: a provider that does not cancel is slow, not stuck.
  before(async () => {
    standIn = await startStandIn({ slowDelayMs: 5 });
  });
  after(async () => {
    await standIn?.close();
    standIn = undefined;
  });

  const good = async () =>
    (await openAiCompatible.create({
      config: openAiCompatible.config.parse({ baseURL: `${running().url}/v1` }),
      deps: {},
      logger: quietLogger(),
    })) as LlmProviderV1;

  /** A provider whose doStream is the good one's, changed by `change`. */
  const broken =
    (change: (inner: LlmProviderV1, request: LlmChatRequest) => AsyncIterable<LlmStreamPart>) => async () => {
      const inner = await good();
      return { ...inner, doStream: (request: LlmChatRequest) => change(inner, request) } as LlmProviderV1;
    };

  async function resultsFor(load: () => Promise<LlmProviderV1>, ids: readonly string[]) {
    const kit = { ...llmProviderKit, behaviour: llmProviderBehaviour(() => standInHarness(running)) };
    const checks = contractChecks(kit, load).filter((check) => ids.includes(check.id));
    const results = await runChecks(checks, {
      redactor: new EvidenceRedactor(),
      timeoutMs: 15_000,
      contextFor: (evidence) => ({ evidence }),
    });
    return Object.fromEntries(results.map((result) => [result.id, result])) as Record<string, CheckResult>;
  }

  it('fails auth-error and key-per-request for a provider that quotes the key in its error', async () => {
    const leaky = broken(async function* (inner, request) {
      try {
        yield* inner.doStream(request);
      } catch (err) {
        if (err instanceof LlmProviderError)
          throw new LlmProviderError(err.kind, `refused ${request.apiKey}`);
        throw err;
      }
    });
    const results = await resultsFor(leaky, ['llm-provider.auth-error', 'llm-provider.key-per-request']);
    for (const id of ['llm-provider.auth-error', 'llm-provider.key-per-request']) {
      expect(results[id], id).to.include({ status: 'fail' });
      expect(results[id]?.reason).to.equal('the key the request carried appears in the auth error it threw');
    }
  });

  it('fails the error checks for a provider that throws plain errors or the wrong kind', async () => {
    const plain = broken(async function* (inner, request) {
      try {
        yield* inner.doStream(request);
      } catch (err) {
        if (err instanceof LlmProviderError && err.kind === 'rate_limit')
          throw new LlmProviderError('upstream', err.message);
        if (err instanceof LlmProviderError && err.kind === 'upstream')
          throw new Error(err.message, { cause: err });
        throw err;
      }
    });
    const results = await resultsFor(plain, ['llm-provider.rate-limit', 'llm-provider.upstream-error']);
    expect(results['llm-provider.rate-limit']?.reason).to.equal(
      'threw an LlmProviderError of kind upstream, expected rate_limit',
    );
    expect(results['llm-provider.upstream-error']?.reason).to.match(
      /^threw Error: .*, not an LlmProviderError$/,
    );
  });

  it('fails stream-text for a stream without usage, and for one with two finish parts', async () => {
    const noUsage = broken(async function* (inner, request) {
      for await (const part of inner.doStream(request)) if (part.type !== 'usage') yield part;
    });
    const twice = broken(async function* (inner, request) {
      for await (const part of inner.doStream(request)) {
        yield part;
        if (part.type === 'finish') yield part;
      }
    });
    expect(
      (await resultsFor(noUsage, ['llm-provider.stream-text']))['llm-provider.stream-text']?.reason,
    ).to.equal('a plain turn: 0 usage parts, expected exactly one');
    expect(
      (await resultsFor(twice, ['llm-provider.stream-text']))['llm-provider.stream-text']?.reason,
    ).to.equal('a plain turn: 2 finish parts, expected exactly one');
  });

  it('fails abort-cancels for a provider that does not pass the signal upstream', async () => {
    const deaf = broken((inner, request) => {
      const { signal: _ignored, ...rest } = request;
      return inner.doStream(rest);
    });
    const results = await resultsFor(deaf, [
      'llm-provider.abort-cancels',
      'llm-provider.aborted-before-start',
    ]);
    expect(results['llm-provider.abort-cancels']?.reason).to.match(
      /^the iteration ended \d+ ms after the abort, over 1000 ms$/,
    );
    expect(results['llm-provider.aborted-before-start']?.reason).to.match(/ parts came$/);
  });

  it('fails break-cancels for a provider that keeps reading upstream after the caller left', async () => {
    const draining = broken(async function* (inner, request) {
      const parts: LlmStreamPart[] = [];
      let wake = () => {};
      let done = false;
      void (async () => {
        try {
          for await (const part of inner.doStream(request)) {
            parts.push(part);
            wake();
          }
        } catch {
          // The stand-in closed under it: what this provider does wrong was already seen.
        }
        done = true;
        wake();
      })();
      for (let next = 0; ;) {
        if (next < parts.length) yield parts[next++] as LlmStreamPart;
        else if (done) return;
        else await new Promise<void>((resolve) => (wake = resolve));
      }
    });
    const results = await resultsFor(draining, ['llm-provider.break-cancels']);
    expect(results['llm-provider.break-cancels']?.reason).to.equal(
      'the upstream request was still open 3000 ms after the break',
    );
  });
});
