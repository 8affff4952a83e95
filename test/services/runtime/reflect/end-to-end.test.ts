import { expect } from 'chai';
import { ManualClock } from '../../../../core/clock.ts';
import { newWallet } from '../../../core/auth/support.ts';
import { eventually } from '../../../support/eventually.ts';
import { describeEachDatabase, stickyDatabase, type TestDatabase } from '../../../support/kernel.ts';
import { newUser, say, session } from '../chat-history-support.ts';
import { readSse, runtimeClient, storeAndUnlock } from '../chat-support.ts';
import { setOnChain } from '../ledger/support.ts';
import { internalKeyStack, type Stack } from '../support.ts';
import { WEDNESDAY_NOON } from './support.ts';

/** A runtime whose runs use the operator's key, on `database` and `clock` (a restart is another call). */
const startRuntime = (database: TestDatabase, clock: ManualClock) =>
  internalKeyStack(database, {
    operatorKey: 'sk-internal-operator-key-reflect-daily',
    chat: {},
    clock,
    selfImprovement: { internalKey: true },
  });

/**
 * The runtime as composed: stored chat sessions → a triggered run of the real pipeline (the stand-in
 * model, the ledger) → learnings on the memory routes.
 */
describe('self-improvement end to end: chat history → a run → learnings', function () {
  this.timeout(180_000);

  describeEachDatabase('reflect end to end', (database) => {
    let stack: Stack;
    let close: () => Promise<void>;

    before(async () => {
      ({ stack, close } = await internalKeyStack(database, {
        operatorKey: 'sk-internal-operator-key-reflect-e2e',
        chat: {},
        selfImprovement: { internalKey: true },
      }));
    });
    after(() => close?.());

    it('a correction in a chat becomes a learning; the run is charged and in the history; deleting it works', async () => {
      const wallet = newWallet();
      const client = runtimeClient(stack.url('runtime'), await stack.signIn(wallet));
      await setOnChain(stack.runtime.ledger.ledger, wallet.address, 10_000_000n);
      const agentId = (await client.json('POST', '/agents', { name: 'a', model: 'sigil-echo' })).body
        .id as string;
      const session = (await client.json('POST', `/agents/${agentId}/sessions`, {})).body.id as string;
      for (const content of ['How warm is Lisbon today?', 'No, always answer in metric units.']) {
        const res = await client.send('POST', `/agents/${agentId}/sessions/${session}/messages`, { content });
        expect((await readSse(res)).map((event) => event.event)).to.include('done');
      }
      const trigger = await client.json('POST', '/wallet/self-improvement/trigger');
      expect(trigger.status).to.equal(202);
      const run = await eventually('the run to end', async () => {
        const history = (await client.json('GET', '/wallet/self-improvement/history')).body;
        const last = history.runs?.[0];
        return last && ['succeeded', 'failed'].includes(last.status) && last;
      });
      expect(run.status, JSON.stringify(run)).to.equal('succeeded');
      // Two model calls, one charge: the run's, named by its id, and the amount its history shows.
      expect(run.cost).to.include({ llmCalls: 2 });
      const transactions = (await client.json('GET', '/wallet/transactions?kind=charge')).body
        .transactions as { amount: string; agentId: string; idempotencyKey: string }[];
      const runCharges = transactions.filter((t) => t.idempotencyKey.startsWith('reflect:'));
      expect(runCharges).to.deep.equal([
        {
          ...runCharges[0],
          amount: run.cost.charged,
          agentId,
          idempotencyKey: `reflect:${run.id}:1:${agentId}`,
        },
      ]);
      expect(BigInt(run.cost.charged) > 0n).to.equal(true);
      const learnings = (await client.json('GET', '/wallet/learnings')).body.learnings as {
        id: string;
        statement: string;
        sources: { sessions: string[] };
      }[];
      expect(learnings.map((l) => l.statement)).to.deep.equal(['Always answer in metric units']);
      expect(learnings[0]?.sources.sessions).to.deep.equal([session]);
      const status = (await client.json('GET', '/wallet/self-improvement/status')).body;
      expect(status.counts).to.include({ learnings: 1 });
      const detail = await client.json('GET', `/wallet/self-improvement/history/${run.id}`);
      expect(detail.body).to.deep.include({ id: run.id, status: 'succeeded' });
      expect(
        detail.body.produced.facets.map((f: { kind: string; statement: string }) => [f.kind, f.statement]),
      ).to.deep.equal([['correction', 'Always answer in metric units']]);
      expect(detail.body.produced.facets[0].sessionId).to.equal(session);
      expect(detail.body.produced.learnings).to.deep.equal([
        {
          id: learnings[0]?.id,
          statement: 'Always answer in metric units',
          confidence: 0.9,
          status: 'active',
        },
      ]);
      const other = runtimeClient(stack.url('runtime'), await stack.signIn(newWallet()));
      expect((await other.json('GET', `/wallet/self-improvement/history/${run.id}`)).status).to.equal(404);
      expect((await client.json('GET', '/wallet/self-improvement/history/not-a-run')).status).to.equal(400);
      expect((await other.json('GET', '/wallet/learnings')).body.learnings).to.deep.equal([]);
      expect((await other.json('DELETE', `/wallet/learnings/${learnings[0]?.id}`)).status).to.equal(404);
      expect((await client.json('DELETE', `/wallet/learnings/${learnings[0]?.id}`)).status).to.equal(204);
      expect((await client.json('GET', '/wallet/learnings')).body.learnings).to.deep.equal([]);
      expect((await client.json('GET', '/wallet/learnings?status=all')).body.learnings).to.deep.equal([]);
      // The words are gone from the database, not only hidden.
      const rows = await stack.kernel.db('reflect_learnings').where({ wallet: wallet.address });
      expect(rows).to.deep.equal([]);
      expect(
        (await client.json('GET', `/wallet/self-improvement/history/${run.id}`)).body.produced.learnings,
      ).to.deep.equal([]);
    });

    it('daily: sessions chatted, the clock moved past midnight, the real pipeline runs once; a restart loses no session and no learning; the next session uses it', async () => {
      const sticky = stickyDatabase(database);
      const clock = new ManualClock(WEDNESDAY_NOON);
      let runtime = await startRuntime(sticky.database, clock);
      try {
        const alice = await newUser(runtime.stack);
        const put = await alice.client.json('PUT', '/wallet/settings', {
          selfImprovement: { schedule: 'daily' },
        });
        expect(put.status).to.equal(200);
        const first = await session(alice.client, alice.agentId);
        await say(alice.client, alice.agentId, first, 'How warm is Lisbon today?');
        await say(alice.client, alice.agentId, first, 'No, always answer in metric units.');
        const second = await session(alice.client, alice.agentId);
        await say(alice.client, alice.agentId, second, 'I need to plan a trip to Porto.');

        const scheduler = () => runtime.stack.runtime.reflect.scheduler;
        expect((await scheduler().pass()).queued, 'nothing is due before midnight').to.deep.equal([]);
        const status = (await alice.client.json('GET', '/wallet/self-improvement/status')).body;
        expect(status.nextRunAt).to.equal('2026-03-19T00:00:00.000Z');

        clock.set(new Date(Date.UTC(2026, 2, 19, 0, 0, 5)));
        const midnight = await scheduler().pass();
        expect(midnight.queued).to.have.length(1);
        await scheduler().settled();
        // A session token lasts an hour: the clock moved past it.
        const signedIn = async () =>
          runtimeClient(runtime.stack.url('runtime'), await runtime.stack.signIn(alice.wallet));
        let client = await signedIn();
        const runs = (await client.json('GET', '/wallet/self-improvement/history')).body.runs;
        expect(runs.map((r: { status: string; trigger: string }) => [r.status, r.trigger])).to.deep.equal([
          ['succeeded', 'schedule'],
        ]);
        expect(runs[0].outcome).to.include({ sessions: 2, learnings: 2 });
        expect(BigInt(runs[0].cost.charged) > 0n, runs[0].cost.charged).to.equal(true);
        const learned = (await client.json('GET', '/wallet/learnings')).body.learnings as {
          id: string;
          statement: string;
        }[];
        expect(learned.map((l) => l.statement).sort()).to.deep.equal([
          'Always answer in metric units',
          'I need to plan a trip to Porto',
        ]);

        await runtime.close();
        runtime = await startRuntime(sticky.database, clock);
        client = await signedIn();
        const sessions = (await client.json('GET', `/agents/${alice.agentId}/sessions`)).body.sessions as {
          id: string;
          messages: number;
        }[];
        expect(sessions.map((s) => [s.id, s.messages]).sort()).to.deep.equal(
          [
            [first, 2],
            [second, 1],
          ].sort(),
        );
        expect((await client.json('GET', '/wallet/learnings')).body.learnings).to.deep.equal(learned);
        const after = (await client.json('GET', '/wallet/self-improvement/status')).body;
        expect(after).to.deep.include({ nextRunAt: '2026-03-20T00:00:00.000Z' });
        expect(after.lastRun.status).to.equal('succeeded');

        const third = await session(client, alice.agentId);
        const answered = await say(client, alice.agentId, third, 'How warm is Faro today?');
        const context = answered.events.find((e) => e.event === 'context')?.data as {
          learnings: { statement: string }[];
        };
        expect(context.learnings.map((l) => l.statement)).to.include('Always answer in metric units');

        // The next midnight reads only the new session: nothing learned twice.
        clock.set(new Date(Date.UTC(2026, 2, 20, 0, 0, 5)));
        expect((await runtime.stack.runtime.reflect.scheduler.pass()).queued).to.have.length(1);
        await runtime.stack.runtime.reflect.scheduler.settled();
        client = await signedIn();
        const again = (await client.json('GET', '/wallet/self-improvement/history')).body.runs;
        expect(again[0]).to.deep.include({ status: 'succeeded' });
        expect(again[0].outcome).to.include({ sessions: 1, learnings: 0 });
        expect((await client.json('GET', '/wallet/learnings')).body.learnings).to.deep.equal(learned);
      } finally {
        await runtime.close();
        await sticky.drop();
      }
    });

    it("a run with no key of the wallet's own waits (waiting_for_unlock, saying what to do) and runs once the vault is unlocked", async () => {
      const own = await internalKeyStack(database, {
        operatorKey: 'sk-internal-operator-key-reflect-wait',
        chat: {},
        selfImprovement: { internalKey: false },
      });
      try {
        const alice = await newUser(own.stack);
        const first = await session(alice.client, alice.agentId);
        await say(alice.client, alice.agentId, first, 'Never use emojis.');
        expect((await alice.client.json('POST', '/wallet/self-improvement/trigger')).status).to.equal(202);
        const waiting = await eventually('the run to wait for a key', async () => {
          const run = (await alice.client.json('GET', '/wallet/self-improvement/status')).body.currentRun;
          return run?.status === 'waiting_for_unlock' && run;
        });
        expect(waiting.error.message).to.include('PUT /wallet/provider-vault/keys/PROVIDER_API_KEY');
        expect(waiting.cost).to.equal(null);
        await storeAndUnlock(alice.client, alice.wallet, 'PROVIDER_API_KEY', 'sk-the-wallets-own-key');
        const done = await eventually('the run to end', async () => {
          const last = (await alice.client.json('GET', '/wallet/self-improvement/status')).body.lastRun;
          return last?.id === waiting.id && last;
        });
        expect(done.status, JSON.stringify(done)).to.equal('succeeded');
        expect(done.outcome).to.include({ sessions: 1, learnings: 1 });
      } finally {
        await own.close();
      }
    });
  });
});
