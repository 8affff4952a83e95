import { expect } from 'chai';
import { newWallet } from '../../../core/auth/support.ts';
import { eventually } from '../../../support/eventually.ts';
import { describeEachDatabase } from '../../../support/kernel.ts';
import { readSse, runtimeClient } from '../chat-support.ts';
import { setOnChain } from '../ledger/support.ts';
import { internalKeyStack, type Stack } from '../support.ts';

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
      const learnings = (await client.json('GET', '/wallet/learnings')).body.learnings as {
        id: string;
        statement: string;
        sources: { sessions: string[] };
      }[];
      expect(learnings.map((l) => l.statement)).to.deep.equal(['Always answer in metric units']);
      expect(learnings[0]?.sources.sessions).to.deep.equal([session]);
      const status = (await client.json('GET', '/wallet/self-improvement/status')).body;
      expect(status.counts).to.include({ learnings: 1 });
      const other = runtimeClient(stack.url('runtime'), await stack.signIn(newWallet()));
      expect((await other.json('GET', '/wallet/learnings')).body.learnings).to.deep.equal([]);
      expect((await other.json('DELETE', `/wallet/learnings/${learnings[0]?.id}`)).status).to.equal(404);
      expect((await client.json('DELETE', `/wallet/learnings/${learnings[0]?.id}`)).status).to.equal(204);
      expect((await client.json('GET', '/wallet/learnings')).body.learnings).to.deep.equal([]);
    });
  });
});
