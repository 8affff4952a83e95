import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { isSigilError, type SigilError } from '@sigil/plugin-api';
import local, { type LocalProvider } from '../../../../providers/local/index.ts';
import type { ProviderEntry } from '../../../../services/runtime/chat/chat.ts';
import type { TurnEstimate } from '../../../../services/runtime/chat/held-turn.ts';
import { asText } from '../../../../services/runtime/ledger/amounts.ts';
import {
  type ConversationSource,
  type HistoryMessage,
  PIPELINE_VERSION,
  ReflectEngine,
} from '../../../../services/runtime/reflect/engine.ts';
import { ReflectMemory } from '../../../../services/runtime/reflect/memory.ts';
import type { ReflectJob } from '../../../../services/runtime/reflect/pipeline.ts';
import { describeEachDatabase, quietLogger } from '../../../support/kernel.ts';
import { openLedgerWorld, randomWallet, setOnChain, type LedgerWorld } from '../ledger/support.ts';

/** Stored conversations as the chat's history store hands them to the pipeline. */
class Conversations implements ConversationSource {
  readonly stored = new Map<string, { wallet: string; agentId: string; messages: HistoryMessage[] }>();

  add(wallet: string, agentId: string, turns: (string | { tool: string; ok: boolean })[]): string {
    const id = randomUUID();
    const messages = turns.map((turn, index): HistoryMessage => {
      const seq = index + 1;
      if (typeof turn !== 'string')
        return { id: `m${seq}-${id}`, seq, role: 'tool', text: '', toolName: turn.tool, isError: !turn.ok };
      return { id: `m${seq}-${id}`, seq, role: index % 2 === 0 ? 'user' : 'assistant', text: turn };
    });
    this.stored.set(id, { wallet, agentId, messages });
    return id;
  }

  sessions(wallet: string) {
    return Promise.resolve(
      [...this.stored]
        .filter(([, session]) => session.wallet === wallet)
        .map(([id, session]) => ({
          id,
          agentId: session.agentId,
          model: 'sigil-echo',
          lastSeq: session.messages.length,
        })),
    );
  }

  messages(_wallet: string, sessionId: string, afterSeq: number) {
    return Promise.resolve(this.stored.get(sessionId)?.messages.filter((m) => m.seq > afterSeq) ?? []);
  }
}

describeEachDatabase('self-improvement: the pipeline (facets, learnings, skills)', (database) => {
  let world: LedgerWorld;
  let provider: LocalProvider;
  let memory: ReflectMemory;
  let conversations: Conversations;
  let engine: ReflectEngine;

  before(async () => {
    world = await openLedgerWorld(database, { config: { ledger: { minimumBalance: '0' } as never } });
    provider = (await local.create({
      config: local.config.parse({}),
      deps: { logger: quietLogger() },
      logger: quietLogger(),
    })) as LocalProvider;
    await provider.start();
    memory = new ReflectMemory(world.kernel.db, world.clock);
    conversations = new Conversations();
    engine = engineWith({});
  });

  /** The engine on the stand-in, this world's ledger and `conversations`, or what `parts` says. */
  function engineWith(parts: { source?: ConversationSource; estimate?: TurnEstimate }): ReflectEngine {
    const entry = async (model: string): Promise<ProviderEntry | undefined> => {
      const found = (await provider.listModels()).find((m) => m.id === model);
      return found && { name: 'provider-local', provider, model: found };
    };
    return new ReflectEngine({
      memory,
      source: parts.source ?? conversations,
      holds: world.service.holds,
      providerFor: entry,
      // Four base units a byte of the messages: a hold always covers the stand-in's turn.
      estimate: () => parts.estimate ?? ((messages) => BigInt(JSON.stringify(messages).length) * 4n),
      keys: () => Promise.resolve({ apiKey: 'reflect-test-key', keyKind: 'byok' }),
      settings: {
        maxSessionsPerRun: 50,
        maxFacetsPerSynthesis: 200,
        maxTranscriptChars: 50_000,
        maxOutputTokens: 4096,
      },
    });
  }
  after(async () => {
    await provider?.stop();
    await world?.close();
  });

  async function funded() {
    const wallet = randomWallet();
    const agentId = (await world.service.agents.create(wallet, { name: 'a', model: 'sigil-echo' })).id;
    await setOnChain(world.ledger, wallet, 10_000_000n);
    return { wallet, agentId };
  }

  const job = (wallet: string, more: Partial<ReflectJob> = {}): ReflectJob => ({
    wallet,
    runId: randomUUID(),
    attempt: 1,
    trigger: 'manual',
    signal: new AbortController().signal,
    ...more,
  });

  /** The wallet's charge entries, oldest first. */
  const charges = async (wallet: string) =>
    (
      (await world.kernel
        .db('ledger_entries')
        .where({ wallet, kind: 'charge' })
        .orderBy('id')
        .select('idempotency_key', 'agent_id', asText(world.kernel.db, 'amount'))) as {
        idempotency_key: string;
        agent_id: string;
        amount: string;
      }[]
    ).map((row) => ({ key: row.idempotency_key, agentId: row.agent_id, amount: BigInt(row.amount) }));

  /** The ledger key a run's charge for an agent is under. */
  const chargeKey = (run: ReflectJob, agentId: string) =>
    `charge:reflect:${run.runId}:${run.attempt}:${agentId}`;

  it('a correction becomes a learning with its provenance, charged once; a second run reads nothing', async () => {
    const { wallet, agentId } = await funded();
    const session = conversations.add(wallet, agentId, [
      'How warm is it in Lisbon?',
      'It is 75 degrees Fahrenheit.',
      'No, always answer in metric units.',
      'Understood.',
    ]);
    const run = job(wallet);
    const outcome = await engine.run(run);
    expect(outcome).to.include({ sessions: 1, facets: 1, learnings: 1, skills: 0, llmCalls: 2 });
    expect(outcome.charged > 0n).to.equal(true);
    // Two calls, one charge: the run's, under its id, attempt and agent.
    expect(await charges(wallet)).to.deep.equal([
      { key: chargeKey(run, agentId), agentId, amount: outcome.charged },
    ]);
    expect(await world.service.holds.get(wallet, chargeKey(run, agentId).slice('charge:'.length))).to.equal(
      undefined,
    );
    const [learning] = await memory.learnings(wallet);
    expect(learning).to.include({ statement: 'Always answer in metric units', confidence: 0.9 });
    expect(learning?.sources.sessions).to.deep.equal([session]);
    const [facet] = await memory.facets(wallet, learning?.sources.facets ?? []);
    expect(facet).to.include({ kind: 'correction', sessionId: session });
    expect(facet?.messageIds).to.deep.equal([`m3-${session}`]);
    const balance = await world.ledger.balance(wallet);
    expect(balance.unsettledSpend).to.equal(outcome.charged);

    const again = await engine.run(job(wallet));
    expect(again).to.include({ sessions: 0, facets: 0, learnings: 0, llmCalls: 0, charged: 0n });
    expect(await charges(wallet)).to.have.length(1);
    expect((await world.ledger.balance(wallet)).unsettledSpend).to.equal(outcome.charged);
    expect((await memory.watermarks(wallet, PIPELINE_VERSION)).get(session)).to.equal(4);
  });

  it('only new messages are read next time, and a contradicting learning supersedes the old one', async () => {
    const { wallet, agentId } = await funded();
    const session = conversations.add(wallet, agentId, ['Always answer in imperial units.', 'Sure.']);
    await engine.run(job(wallet));
    const [old] = await memory.learnings(wallet);
    expect(old?.statement).to.equal('Always answer in imperial units');
    conversations.stored
      .get(session)
      ?.messages.push(
        { id: `m3-${session}`, seq: 3, role: 'user', text: 'Actually, always answer in metric units.' },
        { id: `m4-${session}`, seq: 4, role: 'assistant', text: 'Understood.' },
      );
    const outcome = await engine.run(job(wallet));
    expect(outcome).to.include({ sessions: 1, facets: 1, learnings: 1 });
    const active = await memory.learnings(wallet);
    expect(active.map((l) => l.statement)).to.deep.equal(['Always answer in metric units']);
    const all = await memory.learnings(wallet, 'all');
    const superseded = all.find((l) => l.id === old?.id);
    expect(superseded).to.include({ status: 'superseded', supersededBy: active[0]?.id });
  });

  it('a sequence of tools that worked in two sessions becomes a versioned skill, once', async () => {
    const { wallet, agentId } = await funded();
    const steps = [
      'use tool probe_echo then probe_add',
      { tool: 'probe_echo', ok: true },
      { tool: 'probe_add', ok: true },
    ];
    conversations.add(wallet, agentId, steps);
    conversations.add(wallet, agentId, steps);
    const outcome = await engine.run(job(wallet));
    expect(outcome.skills).to.equal(1);
    const skills = await memory.skills(wallet);
    expect(skills).to.have.length(1);
    expect(skills[0]).to.include({ name: 'probe-echo-then-probe-add', version: 1 });
    expect(skills[0]?.instructions).to.equal('1. Call probe_echo.\n2. Call probe_add.');
    expect(skills[0]?.sources.sessions).to.have.length(2);
  });

  it('a deleted skill is gone with its words; learned again, it starts anew', async () => {
    const { wallet, agentId } = await funded();
    const steps = ['go', { tool: 'probe_echo', ok: true }, { tool: 'probe_add', ok: true }];
    conversations.add(wallet, agentId, steps);
    conversations.add(wallet, agentId, steps);
    await engine.run(job(wallet));
    expect(await memory.deleteSkill(wallet, 'probe-echo-then-probe-add')).to.equal(true);
    expect(await memory.skills(wallet)).to.deep.equal([]);
    expect(await world.kernel.db('reflect_skills').where({ wallet })).to.deep.equal([]);
    conversations.add(wallet, agentId, steps);
    conversations.add(wallet, agentId, steps);
    const again = await engine.run(job(wallet));
    expect(again.skills).to.equal(1);
    expect((await memory.skills(wallet)).map((s) => [s.name, s.version])).to.deep.equal([
      ['probe-echo-then-probe-add', 1],
    ]);
  });

  it('a run whose store never committed is read again by the next run, stored once, and its calls charged again', async () => {
    const { wallet, agentId } = await funded();
    conversations.add(wallet, agentId, ['Never use emojis.', 'Ok.']);
    const firstRun = job(wallet);
    const first = await engine.run(firstRun);
    // As if the store's transaction never committed: the charge stands, the facets and learnings do not.
    await world.kernel.db('reflect_learnings').where({ wallet }).delete();
    await world.kernel.db('reflect_facets').where({ wallet }).delete();
    await world.kernel.db('reflect_watermarks').where({ wallet }).delete();
    const secondRun = job(wallet);
    const second = await engine.run(secondRun);
    expect(second).to.include({ sessions: 1, facets: 1, learnings: 1, llmCalls: 2 });
    // The calls were made again upstream: each run charged its own, once.
    expect(second.charged).to.equal(first.charged);
    expect(await charges(wallet)).to.deep.equal([
      { key: chargeKey(firstRun, agentId), agentId, amount: first.charged },
      { key: chargeKey(secondRun, agentId), agentId, amount: second.charged },
    ]);
    expect((await world.ledger.balance(wallet)).unsettledSpend).to.equal(first.charged + second.charged);
    expect(await memory.learnings(wallet)).to.have.length(1);
  });

  it("a run over sessions of two agents charges each agent once: two entries, their sum the run's charge", async () => {
    const { wallet, agentId: ada } = await funded();
    const bob = (await world.service.agents.create(wallet, { name: 'b', model: 'sigil-echo' })).id;
    conversations.add(wallet, ada, ['Always cite sources.', 'Ok.']);
    conversations.add(wallet, bob, ['Never use emojis.', 'Ok.']);
    conversations.add(wallet, ada, ['I want to learn Portuguese.', 'Ok.']);
    const before = await world.ledger.balance(wallet);
    const run = job(wallet);
    const outcome = await engine.run(run);
    expect(outcome).to.include({ sessions: 3, learnings: 3, llmCalls: 4 });
    const rows = await charges(wallet);
    expect(rows.map((row) => [row.key, row.agentId]).sort()).to.deep.equal(
      [
        [chargeKey(run, ada), ada],
        [chargeKey(run, bob), bob],
      ].sort(),
    );
    const sum = rows.reduce((total, row) => total + row.amount, 0n);
    expect(rows.every((row) => row.amount > 0n)).to.equal(true);
    expect(sum).to.equal(outcome.charged);
    const after = await world.ledger.balance(wallet);
    expect(after.unsettledSpend - before.unsettledSpend).to.equal(outcome.charged);
    expect(after.available).to.equal(before.available - outcome.charged);
    expect(after.heldSpend).to.equal(0n);
    // Each agent's budget windows count its own charge.
    for (const row of rows)
      expect((await world.ledger.budgets(wallet, row.agentId)).daily).to.include({
        spent: row.amount,
        held: 0n,
      });
    expect((await world.ledger.audit(wallet)).mismatches).to.deep.equal([]);
  });

  it('a budget too small for the second call fails the run with payment_required; the first call is charged once', async () => {
    const { wallet, agentId } = await funded();
    // 1000 base units upstream at most a call: a call needs 100 of the hold, 200 with the room for one
    // more. 110 a day: the first hold is taken without the room, the second call's 100 more is refused.
    await world.ledger.setBudgets(wallet, agentId, { daily: 110n, weekly: null, monthly: null });
    const first = conversations.add(wallet, agentId, ['Always answer briefly.', 'Ok.']);
    const second = conversations.add(wallet, agentId, ['Never use emojis.', 'Ok.']);
    const run = job(wallet);
    const refused = await engineWith({ estimate: () => 1000n })
      .run(run)
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    expect(isSigilError(refused) && refused.code, String(refused)).to.equal('payment_required');
    expect((refused as SigilError).details).to.include({ reason: 'budget_exceeded', agentId });
    const rows = await charges(wallet);
    expect(rows).to.have.length(1);
    expect(rows[0]).to.include({ key: chargeKey(run, agentId), agentId });
    expect((rows[0]?.amount ?? 0n) > 0n).to.equal(true);
    const balance = await world.ledger.balance(wallet);
    expect(balance).to.include({ unsettledSpend: rows[0]?.amount, heldSpend: 0n });
    // The first session's facets are stored; the second is read again by a next run.
    const marks = await memory.watermarks(wallet, PIPELINE_VERSION);
    expect(marks.get(first)).to.equal(2);
    expect(marks.has(second)).to.equal(false);
    expect(await world.service.holds.releaseExpired()).to.equal(0);
    expect(await charges(wallet)).to.have.length(1);
  });

  it('a run aborted at shutdown after its first call charges that call once; its next attempt charges its own', async () => {
    const { wallet, agentId } = await funded();
    conversations.add(wallet, agentId, ['Always answer briefly.', 'Ok.']);
    const later = conversations.add(wallet, agentId, ['Never use emojis.', 'Ok.']);
    const controller = new AbortController();
    // The shutdown comes while the run reads its second session.
    const stopping: ConversationSource = {
      sessions: (w) => conversations.sessions(w),
      messages: (w, id, after) => {
        if (id === later) controller.abort(new Error('The runtime is shutting down'));
        return conversations.messages(w, id, after);
      },
    };
    const run = job(wallet, { signal: controller.signal });
    const aborted = await engineWith({ source: stopping })
      .run(run)
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    expect(aborted).to.be.instanceOf(Error);
    const [stopped, ...none] = await charges(wallet);
    expect(none).to.deep.equal([]);
    expect(stopped).to.include({ key: chargeKey(run, agentId) });
    expect(await world.ledger.balance(wallet)).to.include({ heldSpend: 0n, unsettledSpend: stopped?.amount });
    const resumed = { ...run, attempt: 2, signal: new AbortController().signal };
    const outcome = await engine.run(resumed);
    expect(outcome).to.include({ sessions: 1, llmCalls: 2 });
    expect((await charges(wallet)).map((row) => [row.key, row.amount])).to.deep.equal([
      [chargeKey(run, agentId), stopped?.amount],
      [chargeKey(resumed, agentId), outcome.charged],
    ]);
  });

  it('a run whose process died mid-run: the sweep charges the cost it recorded, once; the resumed attempt charges only its own calls', async () => {
    const { wallet, agentId } = await funded();
    const sessions = [
      conversations.add(wallet, agentId, ['Always answer briefly.', 'Ok.']),
      conversations.add(wallet, agentId, ['Never use emojis.', 'Ok.']),
      conversations.add(wallet, agentId, ['Always cite sources.', 'Ok.']),
    ];
    // The process "dies" as the run reads its third session: the run never goes on, nothing settles.
    let died!: () => void;
    const dead = new Promise<void>((resolve) => (died = resolve));
    const dying: ConversationSource = {
      sessions: (w) => conversations.sessions(w),
      messages: (w, id, after) => {
        if (id !== sessions[2]) return conversations.messages(w, id, after);
        died();
        return new Promise(() => {});
      },
    };
    const run = job(wallet);
    void engineWith({ source: dying }).run(run);
    await dead;
    const holds = world.service.holds;
    const key = chargeKey(run, agentId).slice('charge:'.length);
    const held = await holds.get(wallet, key);
    const recorded = held?.settleCost ?? 0n;
    expect(recorded > 0n, 'the cost of its two calls is on its hold').to.equal(true);
    expect(await charges(wallet)).to.deep.equal([]);

    world.clock.advance(holds.ttlMs);
    expect(await holds.releaseExpired()).to.equal(1);
    expect(await charges(wallet)).to.deep.equal([{ key: `charge:${key}`, agentId, amount: recorded }]);
    const resumed = { ...run, attempt: 2 };
    const outcome = await engine.run(resumed);
    expect(outcome).to.include({ sessions: 1, llmCalls: 2 });
    expect(await holds.releaseExpired()).to.equal(0);
    expect(await charges(wallet)).to.deep.equal([
      { key: `charge:${key}`, agentId, amount: recorded },
      { key: chargeKey(resumed, agentId), agentId, amount: outcome.charged },
    ]);
    expect(await world.ledger.balance(wallet)).to.include({
      heldSpend: 0n,
      unsettledSpend: recorded + outcome.charged,
    });
    // Every session was read once: two by the dead attempt, one by the resumed one.
    const marks = await memory.watermarks(wallet, PIPELINE_VERSION);
    expect(sessions.map((id) => marks.get(id))).to.deep.equal([2, 2, 2]);
  });

  it('forgetting a session deletes what was learned only from it; a learning with other sources keeps those', async () => {
    const { wallet, agentId } = await funded();
    const a = conversations.add(wallet, agentId, ['Always cite sources.', 'Ok.']);
    const b = conversations.add(wallet, agentId, ['Never use emojis.', 'Ok.']);
    const c = conversations.add(wallet, agentId, ['Always cite sources.', 'Ok.']);
    await engine.run(job(wallet));
    expect((await memory.learnings(wallet)).map((l) => l.statement).sort()).to.deep.equal([
      'Always cite sources',
      'Never use emojis',
    ]);
    const emojis = (await memory.learnings(wallet)).find((l) => l.statement === 'Never use emojis');
    expect(await memory.forgetSession(wallet, b)).to.deep.equal({ facets: 1, learnings: 1, skills: 0 });
    // Removed, not only marked: no status shows it, no row holds it.
    expect((await memory.learnings(wallet, 'all')).map((l) => l.statement)).to.deep.equal([
      'Always cite sources',
    ]);
    expect(await world.kernel.db('reflect_learnings').where({ id: emojis?.id })).to.deep.equal([]);
    // Learned from two sessions: forgetting one keeps it, with the other as its only source.
    const [before] = await memory.learnings(wallet);
    const facetOfA = (await memory.facets(wallet, before?.sources.facets ?? [])).find(
      (f) => f.sessionId === a,
    );
    expect(await memory.forgetSession(wallet, a)).to.deep.equal({ facets: 1, learnings: 0, skills: 0 });
    const [kept] = await memory.learnings(wallet);
    expect(kept).to.include({ id: before?.id, statement: 'Always cite sources' });
    expect(kept?.sources.sessions).to.deep.equal([c]);
    expect(kept?.sources.facets).to.have.length(1);
    expect(kept?.sources.facets).to.not.include(facetOfA?.id);
    const watermarks = await memory.watermarks(wallet, PIPELINE_VERSION);
    expect([...watermarks.keys()]).to.deep.equal([c]);
  });

  it('forgetting the session of a superseding learning removes it; the one it superseded stays superseded', async () => {
    const { wallet, agentId } = await funded();
    conversations.add(wallet, agentId, ['Always answer in imperial units.', 'Sure.']);
    await engine.run(job(wallet));
    const later = conversations.add(wallet, agentId, ['Actually, always answer in metric units.', 'Ok.']);
    await engine.run(job(wallet));
    const [metric] = await memory.learnings(wallet);
    expect(metric?.statement).to.equal('Always answer in metric units');
    expect(await memory.forgetSession(wallet, later)).to.deep.equal({ facets: 1, learnings: 1, skills: 0 });
    expect(await memory.learnings(wallet)).to.deep.equal([]);
    const [imperial] = await memory.learnings(wallet, 'all');
    expect(imperial).to.include({
      statement: 'Always answer in imperial units',
      status: 'superseded',
      supersededBy: null,
    });
  });

  it('forgetting a session removes a skill version drawn only from it; one drawn from others keeps them', async () => {
    const { wallet, agentId } = await funded();
    const steps = [
      'use tool probe_echo then probe_add',
      { tool: 'probe_echo', ok: true },
      { tool: 'probe_add', ok: true },
    ];
    const [a, b, c] = [1, 2, 3].map(() => conversations.add(wallet, agentId, steps)) as [
      string,
      string,
      string,
    ];
    await engine.run(job(wallet));
    const [skill] = await memory.skills(wallet);
    expect(skill?.sources.sessions).to.have.members([a, b, c]);
    expect(await memory.forgetSession(wallet, a)).to.deep.equal({ facets: 2, learnings: 0, skills: 0 });
    expect((await memory.skills(wallet))[0]?.sources.sessions).to.have.members([b, c]);
    await memory.forgetSession(wallet, b);
    expect(await memory.forgetSession(wallet, c)).to.deep.equal({ facets: 2, learnings: 0, skills: 1 });
    expect(await memory.skills(wallet)).to.deep.equal([]);
    expect(await world.kernel.db('reflect_skills').where({ wallet })).to.deep.equal([]);
  });

  it('a hold the budget refuses stops the run before any call, and stores nothing', async () => {
    const wallet = randomWallet();
    const agentId = (await world.service.agents.create(wallet, { name: 'a', model: 'sigil-echo' })).id;
    conversations.add(wallet, agentId, ['Always answer briefly.', 'Ok.']);
    let refused: SigilError | undefined;
    await engine.run(job(wallet)).catch((err: unknown) => {
      if (isSigilError(err)) refused = err;
    });
    expect(refused?.code).to.equal('payment_required');
    expect(refused?.details).to.include({ purpose: 'self_improvement' });
    expect(refused?.message).to.match(/^Refused: a self-improvement run needs /);
    expect(await memory.counts(wallet)).to.deep.equal({ facets: 0, learnings: 0, skills: 0 });
    expect(await memory.watermarks(wallet, PIPELINE_VERSION)).to.have.property('size', 0);
    expect(await charges(wallet)).to.deep.equal([]);
    expect(await world.ledger.balance(wallet)).to.include({ heldSpend: 0n });
  });
});
