import { expect } from 'chai';
import type { LlmChatRequest } from '@sigil/plugin-api';
import type { PrivateKeyAccount } from 'viem/accounts';
import { newWallet } from '../../../core/auth/support.ts';
import { eventually } from '../../../support/eventually.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { readSse, runtimeClient, type SseEvent } from '../chat-support.ts';
import { setOnChain } from '../ledger/support.ts';
import { internalKeyStack, type Stack } from '../support.ts';
import { relevantLearnings } from '../../../../services/runtime/reflect/chat-context.ts';
import type { Learning } from '../../../../services/runtime/reflect/memory.ts';

const CORRECTION = 'Always answer in metric units';

/** Every request the runtime's (real, stand-in backed) provider is given, in order. */
function recordModelInputs(stack: Stack): LlmChatRequest[] {
  const [provider] = stack.kernel.plugins.all('llm-provider');
  if (!provider) throw new Error('no llm-provider loaded');
  const seen: LlmChatRequest[] = [];
  const doStream = provider.doStream.bind(provider);
  provider.doStream = (request) => {
    seen.push(request);
    return doStream(request);
  };
  return seen;
}

const systemOf = (request: LlmChatRequest | undefined) =>
  request?.messages.filter((m) => m.role === 'system').map((m) => m.content) ?? [];

describe("self-improvement in chats: learnings in the model's context, skills behind load_skill", function () {
  this.timeout(180_000);

  describeEachDatabase('reflect chat context', (database) => {
    let stack: Stack;
    let close: () => Promise<void>;
    let inputs: LlmChatRequest[];

    before(async () => {
      ({ stack, close } = await internalKeyStack(database, {
        operatorKey: 'sk-internal-operator-key-reflect-context',
        chat: {},
        selfImprovement: { internalKey: true },
      }));
      inputs = recordModelInputs(stack);
    });
    after(() => close?.());

    async function user(wallet: PrivateKeyAccount = newWallet()) {
      const client = runtimeClient(stack.url('runtime'), await stack.signIn(wallet));
      await setOnChain(stack.runtime.ledger.ledger, wallet.address, 10_000_000n);
      const agentId = (await client.json('POST', '/agents', { name: 'a', model: 'sigil-echo' })).body
        .id as string;
      const openSession = async (system?: string) =>
        (await client.json('POST', `/agents/${agentId}/sessions`, system ? { system } : {})).body
          .id as string;
      const say = async (session: string, content: string): Promise<SseEvent[]> => {
        const events = await readSse(
          await client.send('POST', `/agents/${agentId}/sessions/${session}/messages`, { content }),
        );
        expect(
          events.map((e) => e.event),
          JSON.stringify(events),
        ).to.include('done');
        return events;
      };
      return { wallet, client, agentId, openSession, say };
    }

    async function learnFromCorrection(u: Awaited<ReturnType<typeof user>>) {
      const first = await u.openSession();
      await u.say(first, 'How warm is Lisbon today?');
      await u.say(first, `No, ${CORRECTION.toLowerCase()}.`);
      expect((await u.client.json('POST', '/wallet/self-improvement/trigger')).status).to.equal(202);
      const run = await eventually('the run to end', async () => {
        const last = (await u.client.json('GET', '/wallet/self-improvement/history')).body.runs?.[0];
        return last && ['succeeded', 'failed'].includes(last.status) && last;
      });
      expect(run.status, JSON.stringify(run)).to.equal('succeeded');
      const learnings = (await u.client.json('GET', '/wallet/learnings')).body.learnings as Learning[];
      expect(learnings.map((l) => l.statement)).to.deep.equal([CORRECTION]);
      return learnings[0] as Learning;
    }

    it("a scripted user's correction is in the next session's model input (not its stored history); deleted, it is gone from the next", async () => {
      const u = await user();
      const learning = await learnFromCorrection(u);

      const second = await u.openSession('You are terse.');
      const before = inputs.length;
      const events = await u.say(second, 'How warm is Porto today?');
      const input = inputs[before];
      // One system message: the session's own prompt, then what was learned.
      expect(systemOf(input)).to.have.length(1);
      expect(systemOf(input)[0]).to.match(/^You are terse\.\n\n/);
      expect(systemOf(input)[0]).to.include(`- ${CORRECTION}`);
      expect(input?.messages.at(-1)).to.deep.equal({ role: 'user', content: 'How warm is Porto today?' });
      const context = events.find((e) => e.event === 'context');
      expect(context?.data).to.deep.equal({
        learnings: [{ id: learning.id, statement: CORRECTION }],
        skills: [],
      });
      expect(events.map((e) => e.event).indexOf('context')).to.be.below(
        events.map((e) => e.event).indexOf('text-delta'),
      );
      // The context is the model's, not the conversation's: the stored history has the prompt as given.
      const stored = (await u.client.json('GET', `/agents/${u.agentId}/sessions/${second}/messages`)).body;
      expect(JSON.stringify(stored)).not.to.include(CORRECTION);

      expect((await u.client.json('DELETE', `/wallet/learnings/${learning.id}`)).status).to.equal(204);
      const third = await u.openSession();
      const afterDelete = inputs.length;
      const plain = await u.say(third, 'How warm is Faro today?');
      expect(systemOf(inputs[afterDelete])).to.deep.equal([]);
      expect(JSON.stringify(inputs[afterDelete]?.messages)).not.to.include(CORRECTION);
      expect(plain.map((e) => e.event)).not.to.include('context');
    });

    it('useInChats false keeps learnings out of chats (they stay listed); true brings them back', async () => {
      const u = await user();
      await learnFromCorrection(u);
      await u.client.json('PUT', '/wallet/settings', { selfImprovement: { useInChats: false } });
      const session = await u.openSession();
      const off = inputs.length;
      expect((await u.say(session, 'And Madrid?')).map((e) => e.event)).not.to.include('context');
      expect(JSON.stringify(inputs[off]?.messages)).not.to.include(CORRECTION);
      expect((await u.client.json('GET', '/wallet/learnings')).body.learnings).to.have.length(1);
      await u.client.json('PUT', '/wallet/settings', { selfImprovement: { useInChats: true } });
      const on = inputs.length;
      await u.say(session, 'And Seville?');
      expect(systemOf(inputs[on])[0]).to.include(CORRECTION);
    });

    it("load_skill: the model sees the wallet's skills and loads one's instructions, answered by the runtime, free", async () => {
      const u = await user();
      const other = await user();
      await stack.runtime.memory.apply(u.wallet.address, 'run-seeded-by-test', [], {
        learnings: [],
        skills: [
          {
            name: 'search-then-summarize',
            description: 'Searches the web, then summarizes the results',
            instructions: '1. Call search with the question.\n2. Call summarize with the results.',
            tools: ['web__search', 'text__summarize'],
            facets: [],
          },
        ],
      });
      const session = await u.openSession();
      const before = inputs.length;
      const events = await u.say(session, 'use tool load_skill with {"name":"search-then-summarize"}');
      const first = inputs[before];
      expect(first?.tools?.map((t) => t.name)).to.deep.equal(['load_skill']);
      expect(systemOf(first)[0]).to.include('- search-then-summarize: Searches the web, then summarizes');
      const result = events.find((e) => e.event === 'tool-result')?.data as Record<string, unknown>;
      expect(result).to.include({ name: 'load_skill', isError: false, billed: false });
      expect(result.content).to.include('1. Call search with the question.');
      expect(result.content).to.include('Tools: web__search, text__summarize');
      expect(events.find((e) => e.event === 'context')?.data).to.deep.equal({
        learnings: [],
        skills: [{ name: 'search-then-summarize', version: 1 }],
      });
      // The model's second turn read the instructions; the charge holds no tool call.
      expect(JSON.stringify(inputs[before + 1]?.messages)).to.include('Call summarize with the results');
      const cost = events.find((e) => e.event === 'cost')?.data as Record<string, unknown>;
      expect(cost.toolCalls).to.equal(0);
      // Another wallet's chat gets neither the skill nor the tool.
      const elsewhere = await other.openSession();
      const otherInput = inputs.length;
      await other.say(elsewhere, 'use tool load_skill with {"name":"search-then-summarize"}');
      expect(inputs[otherInput]?.tools).to.equal(undefined);
      expect(systemOf(inputs[otherInput])).to.deep.equal([]);
    });
  });
});

describe('relevantLearnings', () => {
  const learning = (statement: string, confidence: number, updatedAt: string): Learning => ({
    id: statement,
    statement,
    confidence,
    status: 'active',
    supersededBy: null,
    sources: { facets: [], sessions: [] },
    runId: null,
    createdAt: updatedAt,
    updatedAt,
    editedAt: null,
  });
  const all = [
    learning('Prefers tea to coffee', 0.9, '2026-01-01'),
    learning('Always answer in metric units', 0.6, '2026-01-02'),
    learning('Writes TypeScript at work', 0.8, '2026-01-03'),
  ];

  it('shows all up to the limit, in their order', () => {
    expect(relevantLearnings(all, 'anything', 3)).to.deep.equal(all);
  });

  it('beyond the limit: words shared with the message first, then confidence, then the newest', () => {
    const chosen = (message: string, limit: number) =>
      relevantLearnings(all, message, limit).map((l) => l.statement);
    expect(chosen('How many units in a metric ton?', 1)).to.deep.equal(['Always answer in metric units']);
    expect(chosen('hello', 2)).to.deep.equal(['Prefers tea to coffee', 'Writes TypeScript at work']);
    expect(chosen('hello', 0)).to.deep.equal([]);
  });
});
