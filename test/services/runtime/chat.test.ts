import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type { PrivateKeyAccount } from 'viem/accounts';
import type { LocalProvider } from '../../../providers/local/index.ts';
import { newWallet } from '../../core/auth/support.ts';
import { setOnChain } from './ledger/support.ts';
import { stickyDatabase, TEST_DATABASES } from '../../support/kernel.ts';
import { readSse, runtimeClient, storeAndUnlock } from './chat-support.ts';
import { pluginsWithLocalProvider, Stack } from './support.ts';

const USD = 1_000_000n;
const INTERNAL_KEY = 'sk-internal-operator-key-4d1c';

describe('runtime chat: sessions, SSE, keys, budgets, cancellation', function () {
  this.timeout(60_000);
  const sticky = stickyDatabase(TEST_DATABASES[0]!);
  let dir: string;
  let stack: Stack;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sigil-chat-'));
    stack = await Stack.start({
      database: sticky.database,
      config: {
        vault: { persistenceDir: dir },
        runtime: {
          providerApiKey: INTERNAL_KEY,
          chat: { maxSessionsPerAgent: 2, maxInputChars: 200, resumeGraceSeconds: 1 } as never,
        },
        plugins: pluginsWithLocalProvider({ slowDelayMs: 20 }),
      },
    });
  });
  after(async () => {
    await stack?.close();
    rmSync(dir, { recursive: true, force: true });
    await sticky.drop();
  });

  const standIn = () => (stack.kernel.plugins.all('llm-provider')[0] as LocalProvider).standIn!;

  async function user(options: { funds?: bigint; key?: boolean; model?: string } = {}) {
    const wallet: PrivateKeyAccount = newWallet();
    const jwt = await stack.signIn(wallet);
    const client = runtimeClient(stack.url('runtime'), jwt);
    if (options.funds !== undefined)
      await setOnChain(stack.runtime.ledger.ledger, wallet.address, options.funds);
    if (options.key !== false) await storeAndUnlock(client, wallet, 'PROVIDER_API_KEY', 'sk-wallet-own-key');
    const agent = await client.json('POST', '/agents', { name: 'a', model: options.model ?? 'sigil-echo' });
    expect(agent.status).to.equal(201);
    return { wallet, jwt, client, agentId: agent.body.id as string };
  }

  it('opens a session for the owner only, with a model a provider offers, within the limits', async () => {
    const alice = await user({ funds: USD });
    const opened = await alice.client.json('POST', `/agents/${alice.agentId}/sessions`, {});
    expect(opened.status).to.equal(201);
    expect(opened.body).to.include({
      agentId: alice.agentId,
      model: 'sigil-echo',
      provider: 'provider-local',
    });
    expect(opened.body.limits).to.include({ maxSessionsPerAgent: 2, maxInputChars: 200 });

    const mallory = await user({ funds: USD });
    const stolen = await mallory.client.json('POST', `/agents/${alice.agentId}/sessions`, {});
    expect(stolen.status).to.equal(404);
    const peek = await mallory.client.json('GET', `/agents/${alice.agentId}/sessions/${opened.body.id}`);
    expect(peek.status).to.equal(404);
    const chat = await mallory.client.json(
      'POST',
      `/agents/${alice.agentId}/sessions/${opened.body.id}/messages`,
      { content: 'hi' },
    );
    expect(chat.status).to.equal(404);

    // A model no provider offers never makes an agent, so no session can ask for one.
    const refused = await alice.client.json('POST', '/agents', { name: 'b', model: 'gpt-nowhere' });
    expect(refused.status).to.equal(400);
    expect(refused.body.details).to.include({ reason: 'model_not_offered', model: 'gpt-nowhere' });
    expect(refused.body.hint).to.include('sigil-echo');
    // An agent whose model its provider has since dropped (stored as it was) gets no session.
    const retired = await stack.runtime.ledger.agents.create(alice.wallet.address, {
      name: 'c',
      model: 'gpt-retired',
    });
    const noSession = await alice.client.json('POST', `/agents/${retired.id}/sessions`, {});
    expect(noSession.status).to.equal(409);
    expect(noSession.body.details).to.include({ reason: 'model_not_offered', model: 'gpt-retired' });
    expect(noSession.body.hint).to.include('sigil-echo');

    expect((await alice.client.json('POST', `/agents/${alice.agentId}/sessions`, {})).status).to.equal(201);
    const third = await alice.client.json('POST', `/agents/${alice.agentId}/sessions`, {});
    expect(third.status).to.equal(429);
    expect(third.body.details).to.include({ reason: 'too_many_sessions', limit: 2 });
    const bad = await alice.client.json('POST', `/agents/${alice.agentId}/sessions`, { servers: ['Bad Id'] });
    expect(bad.status).to.equal(400);

    const long = await alice.client.json(
      'POST',
      `/agents/${alice.agentId}/sessions/${opened.body.id}/messages`,
      {
        content: 'x'.repeat(201),
      },
    );
    expect(long.status).to.equal(400);
    expect(JSON.stringify(long.body)).to.include('body.content');
    const closed = await alice.client.send('DELETE', `/agents/${alice.agentId}/sessions/${opened.body.id}`);
    expect(closed.status).to.equal(204);
    expect((await alice.client.json('POST', `/agents/${alice.agentId}/sessions`, {})).status).to.equal(201);
  });

  it('streams text, usage, cost and done over SSE, and charges the ledger once at the BYOK price', async () => {
    const alice = await user({ funds: USD });
    const session = (await alice.client.json('POST', `/agents/${alice.agentId}/sessions`, {})).body;
    const res = await alice.client.send('POST', `/agents/${alice.agentId}/sessions/${session.id}/messages`, {
      content: 'hello there world',
      id: 'm1',
    });
    expect(res.status).to.equal(200);
    expect(res.headers.get('content-type')).to.match(/text\/event-stream/);
    const events = await readSse(res);
    const names = events.map((e) => e.event);
    expect(names.filter((n) => n === 'text-delta').length).to.equal(3);
    expect(names.slice(-3)).to.deep.equal(['usage', 'cost', 'done']);
    const text = events
      .filter((e) => e.event === 'text-delta')
      .map((e) => e.data.text)
      .join('');
    expect(text).to.equal('hello there world');
    const usage = events.find((e) => e.event === 'usage')!.data;
    expect(usage).to.include({ inputTokens: 3, outputTokens: 3, baseLlmCost: '9' });
    const cost = events.find((e) => e.event === 'cost')!.data;
    // ceil(0.10 × 9) = 1
    expect(cost).to.include({
      keyKind: 'byok',
      baseLlmCost: '9',
      toolCalls: 0,
      platformCost: '1',
      charged: '1',
    });
    expect(events.at(-1)!.data).to.include({ messageId: 'm1', finishReason: 'stop', steps: 1 });
    const history = await alice.client.json('GET', '/wallet/transactions');
    const charges = (history.body.transactions as { kind: string; amount: string; agentId: string }[]).filter(
      (t) => t.kind === 'charge',
    );
    expect(charges).to.have.length(1);
    expect(charges[0]).to.include({ amount: '1', agentId: alice.agentId });

    const again = await alice.client.json(
      'POST',
      `/agents/${alice.agentId}/sessions/${session.id}/messages`,
      {
        content: 'again',
        id: 'm1',
      },
    );
    expect(again.status).to.equal(409);
    expect(again.body.details).to.include({ reason: 'message_already_answered' });
    const view = await alice.client.json('GET', `/agents/${alice.agentId}/sessions/${session.id}`);
    expect(view.body).to.include({ messages: 1, busy: false });
  });

  it('refuses without a stored key, with a hint naming the slot; the internal key only when allowed', async () => {
    const bob = await user({ funds: USD, key: false });
    const session = (await bob.client.json('POST', `/agents/${bob.agentId}/sessions`, {})).body;
    const served = standIn().stats().served;
    const refused = await bob.client.json('POST', `/agents/${bob.agentId}/sessions/${session.id}/messages`, {
      content: 'hi',
    });
    expect(refused.status).to.equal(409);
    expect(refused.body.details).to.deep.equal({ reason: 'provider_key_missing', slot: 'PROVIDER_API_KEY' });
    expect(refused.body.hint).to.include('PUT /wallet/provider-vault/keys/PROVIDER_API_KEY');
    expect(standIn().stats().served).to.equal(served);

    stack.kernel.config.runtime.chat.internalKey = true;
    try {
      const res = await bob.client.send('POST', `/agents/${bob.agentId}/sessions/${session.id}/messages`, {
        content: 'hello there world',
      });
      const cost = (await readSse(res)).find((e) => e.event === 'cost')!.data;
      // ceil(1.15 × 9) = ceil(10.35) = 11
      expect(cost).to.include({ keyKind: 'internal', baseLlmCost: '9', platformCost: '11', charged: '11' });
    } finally {
      stack.kernel.config.runtime.chat.internalKey = false;
    }
  });

  it('checks the budget before the model is called: a refusal is a 402 and the stand-in sees nothing', async () => {
    const carol = await user({ funds: USD });
    const budget = await carol.client.json('PUT', `/agents/${carol.agentId}/budgets`, { daily: '5' });
    expect(budget.status).to.equal(200);
    const session = (await carol.client.json('POST', `/agents/${carol.agentId}/sessions`, {})).body;
    const before = standIn().stats();
    const refused = await carol.client.json(
      'POST',
      `/agents/${carol.agentId}/sessions/${session.id}/messages`,
      {
        content: 'hi',
      },
    );
    expect(refused.status).to.equal(402);
    expect(refused.body.details).to.include({ reason: 'budget_exceeded', limit: 'daily', remaining: '5' });
    expect(standIn().stats()).to.deep.equal(before);

    const poor = await user({ funds: 100n });
    const poorSession = (await poor.client.json('POST', `/agents/${poor.agentId}/sessions`, {})).body;
    const low = await poor.client.json(
      'POST',
      `/agents/${poor.agentId}/sessions/${poorSession.id}/messages`,
      {
        content: 'hi',
      },
    );
    expect(low.status).to.equal(402);
    expect(low.body.details).to.include({ reason: 'minimum_balance', purpose: 'chat' });
    expect(low.body.message).to.match(
      /^Refused: a chat needs an available balance of at least 10000 base units/,
    );
  });

  it('cancels the upstream call once the client disconnected and none resumed within the grace, and charges what was used once', async () => {
    const dave = await user({ funds: USD, model: 'sigil-slow' });
    const session = (await dave.client.json('POST', `/agents/${dave.agentId}/sessions`, {})).body;
    const before = standIn().stats();
    const abort = new AbortController();
    const res = await dave.client.send(
      'POST',
      `/agents/${dave.agentId}/sessions/${session.id}/messages`,
      { content: 'count', id: 'slow-1' },
      abort.signal,
    );
    let deltas = 0;
    await readSse(res, (e) => e.event === 'text-delta' && ++deltas >= 3, abort).catch(() => []);
    const deadline = Date.now() + 10_000;
    while (standIn().stats().cancelled === before.cancelled && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 20));
    const after = standIn().stats();
    expect(after.cancelled).to.equal(before.cancelled + 1);
    expect(after.open).to.equal(before.open);
    // No usage part came (the turn was cut): nothing used is charged, and the session is free again.
    const deadline2 = Date.now() + 5000;
    let view = await dave.client.json('GET', `/agents/${dave.agentId}/sessions/${session.id}`);
    while (view.body.busy && Date.now() < deadline2) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      view = await dave.client.json('GET', `/agents/${dave.agentId}/sessions/${session.id}`);
    }
    expect(view.body).to.include({ busy: false, messages: 0 });
    // It went on for the grace (1 s, a number every 20 ms) after its client left, then stopped.
    const replayed = await readSse(
      await dave.client.send('GET', `/agents/${dave.agentId}/sessions/${session.id}/messages/slow-1/events`),
    );
    expect(replayed.filter((e) => e.event === 'text-delta').length).to.be.above(deltas);
    expect(replayed.slice(-2).map((e) => [e.event, e.data.details])).to.deep.equal([
      ['error', { reason: 'answer_abandoned' }],
      ['cost', undefined],
    ]);
    // The hold taken before the model ran is given back: nothing stays reserved, nothing was charged.
    expect(await stack.runtime.ledger.ledger.balance(dave.wallet.address)).to.include({
      heldSpend: 0n,
      unsettledSpend: 0n,
      available: USD,
    });
  });
});
