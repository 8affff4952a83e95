import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { eventually } from '../../../support/eventually.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { newDataKey, newUser, say, session, type Client } from '../chat-history-support.ts';
import { internalKeyStack, type Stack } from '../support.ts';

interface LearningView {
  statement: string;
  sources: { sessions: string[]; facets: string[] };
}

/**
 * Deleting a chat session with `?forget=true` (the runtime as composed, the memory sealed under a data
 * key): what self-improvement learned only from that session goes with it, in the same transaction.
 */
describe('self-improvement: a session deleted with forget=true takes what was learned only from it', function () {
  this.timeout(180_000);

  describeEachDatabase('forget on request', (database) => {
    let stack: Stack;
    let close: () => Promise<void>;

    before(async () => {
      ({ stack, close } = await internalKeyStack(database, {
        operatorKey: 'sk-internal-operator-key-reflect-forget',
        chat: {},
        history: { dataKeys: [newDataKey('k1')] },
        selfImprovement: { internalKey: true },
      }));
    });
    after(() => close?.());

    const learnings = async (client: Client): Promise<LearningView[]> =>
      ((await client.json('GET', '/wallet/learnings')).body.learnings as LearningView[]).sort((a, b) =>
        a.statement.localeCompare(b.statement),
      );

    async function learnedRun(client: Client): Promise<void> {
      expect((await client.json('POST', '/wallet/self-improvement/trigger')).status).to.equal(202);
      const run = await eventually('the run to end', async () => {
        const last = (await client.json('GET', '/wallet/self-improvement/history')).body.runs?.[0];
        return last && ['succeeded', 'failed'].includes(last.status) && last;
      });
      expect(run.status, JSON.stringify(run)).to.equal('succeeded');
    }

    it('removes a learning drawn only from the session; one also drawn from another keeps that source; without forget it stays', async () => {
      const db = stack.kernel.db;
      const alice = await newUser(stack);
      const secret = `canary-${randomBytes(6).toString('hex')}`;
      const [a, b, c] = [
        await session(alice.client, alice.agentId),
        await session(alice.client, alice.agentId),
        await session(alice.client, alice.agentId),
      ];
      await say(alice.client, alice.agentId, a, `Never say ${secret}. Always cite sources.`);
      await say(alice.client, alice.agentId, b, 'Always cite sources.');
      await say(alice.client, alice.agentId, c, 'Always answer briefly.');
      await learnedRun(alice.client);
      const before = await learnings(alice.client);
      expect(before.map((l) => [l.statement, l.sources.sessions.sort()])).to.deep.equal([
        ['Always answer briefly', [c]],
        ['Always cite sources', [a, b].sort()],
        [`Never say ${secret}`, [a]],
      ]);
      // Sealed at rest: the memory's rows hold none of the words.
      const memoryRows = async () =>
        JSON.stringify(
          await Promise.all(
            ['reflect_facets', 'reflect_learnings'].map((t) => db(t).where({ wallet: alice.wallet.address })),
          ),
        );
      expect(await memoryRows()).to.not.include(secret);
      expect(await memoryRows()).to.include(a);

      // Another wallet: a 404, and nothing changes.
      const mallory = await newUser(stack);
      const foreign = await mallory.client.json(
        'DELETE',
        `/agents/${alice.agentId}/sessions/${a}?forget=true`,
      );
      expect(foreign.status).to.equal(404);
      // Neither true nor false: a 400 before anything is deleted.
      for (const query of [
        'forget=maybe',
        'forget=1',
        'forget=',
        'forget=true&forget=true',
        'forgets=true',
      ]) {
        const refused = await alice.client.json('DELETE', `/agents/${alice.agentId}/sessions/${a}?${query}`);
        expect(refused.status, query).to.equal(400);
        expect(refused.body.code, query).to.equal('invalid_request');
      }
      const maybe = await alice.client.json('DELETE', `/agents/${alice.agentId}/sessions/${a}?forget=maybe`);
      expect(maybe.body.details.issues[0].path).to.equal('query.forget');
      expect((await alice.client.json('GET', `/agents/${alice.agentId}/sessions/${a}`)).status).to.equal(200);
      expect(await learnings(alice.client)).to.deep.equal(before);

      const forgotten = await alice.client.json(
        'DELETE',
        `/agents/${alice.agentId}/sessions/${a}?forget=true`,
      );
      expect(forgotten.status).to.equal(200);
      expect(forgotten.body).to.deep.equal({ forgotten: { facets: 2, learnings: 1, skills: 0 } });
      expect((await alice.client.json('GET', `/agents/${alice.agentId}/sessions/${a}`)).status).to.equal(404);
      const after = await learnings(alice.client);
      expect(after.map((l) => [l.statement, l.sources.sessions])).to.deep.equal([
        ['Always answer briefly', [c]],
        ['Always cite sources', [b]],
      ]);
      expect(after[1]?.sources.facets).to.have.length(1);
      // Not kept under another status either: no row of the memory names the session any more.
      expect(await memoryRows()).to.not.include(a);
      expect(
        (await alice.client.json('GET', '/wallet/learnings?status=all')).body.learnings as LearningView[],
      ).to.have.length(2);

      // Without forget (or forget=false): the session goes, what was learned from it stays.
      expect((await alice.client.send('DELETE', `/agents/${alice.agentId}/sessions/${c}`)).status).to.equal(
        204,
      );
      const kept = await alice.client.send('DELETE', `/agents/${alice.agentId}/sessions/${b}?forget=false`);
      expect(kept.status).to.equal(204);
      expect((await learnings(alice.client)).map((l) => [l.statement, l.sources.sessions])).to.deep.equal([
        ['Always answer briefly', [c]],
        ['Always cite sources', [b]],
      ]);
    });
  });
});
