import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.ts';
import { describeEachDatabase, stickyDatabase } from '../../support/kernel.ts';
import { runtimeClient } from './chat-support.ts';
import { IDLE_SECONDS, newUser, say, session, start } from './chat-history-support.ts';

describe('runtime chat: conversation history in the database', function () {
  this.timeout(180_000);

  describeEachDatabase('chat history', (database) => {
    it('survives a runtime restart: the model is given the earlier turns, and an answered id stays answered', async () => {
      const sticky = stickyDatabase(database);
      let runtime = await start(sticky.database);
      try {
        const alice = await newUser(runtime.stack);
        const id = await session(alice.client, alice.agentId, { system: 'answer briefly' });
        const first = await say(alice.client, alice.agentId, id, 'hello there world', 'm1');
        // The stand-in counts the words it was sent: the system prompt (2) and the message (3).
        expect(first.usage.inputTokens).to.equal(5);

        await runtime.close();
        runtime = await start(sticky.database);
        const client = runtimeClient(runtime.stack.url('runtime'), await runtime.stack.signIn(alice.wallet));
        const view = await client.json('GET', `/agents/${alice.agentId}/sessions/${id}`);
        expect(view.body).to.include({ state: 'open', messages: 1, system: 'answer briefly', busy: false });

        const second = await say(client, alice.agentId, id, 'and again', 'm2');
        // After the restart the model was sent the system prompt, the first exchange and the new message.
        expect(second.usage.inputTokens).to.equal(2 + 3 + 3 + 2);
        const replay = await client.json('POST', `/agents/${alice.agentId}/sessions/${id}/messages`, {
          content: 'hello there world',
          id: 'm1',
        });
        expect(replay.status).to.equal(409);
        expect(replay.body.details).to.include({ reason: 'message_already_answered', messageId: 'm1' });

        const read = await client.json('GET', `/agents/${alice.agentId}/sessions/${id}/messages`);
        expect(read.status).to.equal(200);
        expect(
          (read.body.messages as Record<string, unknown>[]).map((m) => [
            m.seq,
            m.messageId,
            m.role,
            m.content,
            m.cost,
          ]),
        ).to.deep.equal([
          [1, 'm1', 'user', 'hello there world', null],
          [2, 'm1', 'assistant', 'hello there world', first.cost.platformCost],
          [3, 'm2', 'user', 'and again', null],
          [4, 'm2', 'assistant', 'and again', second.cost.platformCost],
        ]);
        expect(read.body.nextCursor).to.equal(null);
      } finally {
        await runtime.close();
        await sticky.drop();
      }
    });

    it('any replica serves a session: opened and answered on one, continued on another', async () => {
      const sticky = stickyDatabase(database);
      const one = await start(sticky.database);
      const two = await start(sticky.database);
      try {
        const bob = await newUser(one.stack);
        const id = await session(bob.client, bob.agentId);
        await say(bob.client, bob.agentId, id, 'one two three');
        const elsewhere = runtimeClient(two.stack.url('runtime'), await two.stack.signIn(bob.wallet));
        const next = await say(elsewhere, bob.agentId, id, 'four five');
        expect(next.usage.inputTokens).to.equal(3 + 3 + 2);
        const listed = await bob.client.json('GET', `/agents/${bob.agentId}/sessions`);
        expect(listed.body.sessions).to.have.length(1);
        expect(listed.body.sessions[0]).to.include({ id, messages: 2, state: 'open' });
      } finally {
        await two.close();
        await one.close();
        await sticky.drop();
      }
    });

    describe('routes', () => {
      const clock = new ManualClock();
      let runtime: Awaited<ReturnType<typeof start>>;
      before(async () => {
        runtime = await start(database, { clock });
      });
      after(() => runtime?.close());

      it('a session at its most messages takes no more, with or without an id, charging and changing nothing; an answered id is still told so', async () => {
        const dave = await newUser(runtime.stack);
        const id = await session(dave.client, dave.agentId);
        await say(dave.client, dave.agentId, id, 'the first', 'm1');
        const max = runtime.stack.kernel.config.runtime.chat.maxMessagesPerSession;
        await runtime.stack.kernel.db('chat_sessions').where({ id }).update({ user_messages: max });
        const state = async () => ({
          session: (await dave.client.json('GET', `/agents/${dave.agentId}/sessions/${id}`)).body,
          balance: (await dave.client.json('GET', '/wallet/balance')).body,
        });
        const before = await state();
        expect(before.session).to.include({ state: 'open', messages: max, busy: false });
        for (const messageId of [undefined, 'm2']) {
          const refused = await dave.client.json('POST', `/agents/${dave.agentId}/sessions/${id}/messages`, {
            content: 'one more',
            ...(messageId ? { id: messageId } : {}),
          });
          expect(refused.status, JSON.stringify(refused.body)).to.equal(409);
          expect(refused.body.details).to.include({ reason: 'session_full', limit: max });
        }
        const replay = await dave.client.json('POST', `/agents/${dave.agentId}/sessions/${id}/messages`, {
          content: 'the first',
          id: 'm1',
        });
        expect(replay.status).to.equal(409);
        expect(replay.body.details).to.include({ reason: 'message_already_answered', messageId: 'm1' });
        expect(await state()).to.deep.equal(before);
      });

      it('an idle session ends: no more chatting, its history still readable and listed as ended', async () => {
        const carol = await newUser(runtime.stack);
        const id = await session(carol.client, carol.agentId);
        await say(carol.client, carol.agentId, id, 'remember this');
        const used = (await carol.client.json('GET', `/agents/${carol.agentId}/sessions/${id}`)).body;
        clock.advance(IDLE_SECONDS * 1000 + 1);

        const refused = await carol.client.json('POST', `/agents/${carol.agentId}/sessions/${id}/messages`, {
          content: 'still there?',
        });
        expect(refused.status).to.equal(409);
        expect(refused.body.details).to.include({ reason: 'session_ended', endReason: 'expired' });
        const view = (await carol.client.json('GET', `/agents/${carol.agentId}/sessions/${id}`)).body;
        expect(view).to.include({ state: 'ended', endReason: 'expired', messages: 1 });
        expect(Date.parse(view.endedAt as string)).to.equal(
          Date.parse(used.lastUsedAt as string) + IDLE_SECONDS * 1000,
        );
        const read = await carol.client.json('GET', `/agents/${carol.agentId}/sessions/${id}/messages`);
        expect((read.body.messages as { content: string }[]).map((m) => m.content)).to.deep.equal([
          'remember this',
          'remember this',
        ]);
        const ended = await carol.client.json('GET', `/agents/${carol.agentId}/sessions?state=ended`);
        expect((ended.body.sessions as { id: string }[]).map((s) => s.id)).to.deep.equal([id]);
        const open = await carol.client.json('GET', `/agents/${carol.agentId}/sessions?state=open`);
        expect(open.body.sessions).to.deep.equal([]);
      });

      it('lists an agent’s sessions by pages, newest first, ended ones included; ends one on request', async () => {
        const dave = await newUser(runtime.stack);
        const ids: string[] = [];
        for (let i = 0; i < 3; i++) {
          ids.push(await session(dave.client, dave.agentId));
          clock.advance(1000);
        }
        // At the limit (3 open), ending one makes room; ending it again is a conflict.
        expect((await dave.client.json('POST', `/agents/${dave.agentId}/sessions`, {})).status).to.equal(429);
        const ended = await dave.client.json('POST', `/agents/${dave.agentId}/sessions/${ids[0]}/end`, {});
        expect(ended.status).to.equal(200);
        expect(ended.body).to.include({ id: ids[0], state: 'ended', endReason: 'closed' });
        const twice = await dave.client.json('POST', `/agents/${dave.agentId}/sessions/${ids[0]}/end`, {});
        expect(twice.status).to.equal(409);
        expect(twice.body.details).to.include({ reason: 'session_ended' });
        ids.push(await session(dave.client, dave.agentId));

        const seen: string[] = [];
        let cursor: string | null = null;
        do {
          const page = await dave.client.json(
            'GET',
            `/agents/${dave.agentId}/sessions?limit=2${cursor ? `&cursor=${cursor}` : ''}`,
          );
          expect(page.status).to.equal(200);
          const listed = page.body.sessions as { id: string }[];
          expect(listed.length).to.be.at.most(2);
          seen.push(...listed.map((s) => s.id));
          cursor = page.body.nextCursor as string | null;
        } while (cursor);
        expect(seen).to.deep.equal([...ids].reverse());
      });

      it('deletes a session and its history; the listeners run in the deleting transaction', async () => {
        const erin = await newUser(runtime.stack);
        const id = await session(erin.client, erin.agentId);
        await say(erin.client, erin.agentId, id, 'forget me');
        const history = runtime.stack.runtime.history;
        const told: string[] = [];
        let refuse = true;
        history.onSessionDeleted(async (deleted, trx) => {
          const rows = await trx('chat_messages').where({ session_id: deleted.id }).count({ n: '*' });
          told.push(`${deleted.id}:${Number(rows[0]?.n)}`);
          if (refuse) throw new Error('the learnings could not be removed');
          return undefined;
        });
        const failed = await erin.client.json('DELETE', `/agents/${erin.agentId}/sessions/${id}`);
        expect(failed.status).to.equal(500);
        // Rolled back: the session and its messages are all still there.
        expect(
          (await erin.client.json('GET', `/agents/${erin.agentId}/sessions/${id}/messages`)).body.messages,
        ).to.have.length(2);
        refuse = false;
        const deleted = await erin.client.send('DELETE', `/agents/${erin.agentId}/sessions/${id}`);
        expect(deleted.status).to.equal(204);
        expect(told).to.deep.equal([`${id}:2`, `${id}:2`]);
        expect((await erin.client.json('GET', `/agents/${erin.agentId}/sessions/${id}`)).status).to.equal(
          404,
        );
        const db = runtime.stack.kernel.db;
        expect(await db('chat_messages').where({ session_id: id })).to.deep.equal([]);
        expect(await db('chat_sessions').where({ id })).to.deep.equal([]);
      });

      it('gives the pipeline a wallet’s sessions changed after a watermark, ended ones by default, with message ids', async () => {
        const gina = await newUser(runtime.stack);
        const history = runtime.stack.runtime.history;
        const wallet = gina.wallet.address;
        const a = await session(gina.client, gina.agentId);
        await say(gina.client, gina.agentId, a, 'first session words', 'a1');
        const b = await session(gina.client, gina.agentId);
        await say(gina.client, gina.agentId, b, 'second session', 'b1');
        await session(gina.client, gina.agentId); // no message: nothing to learn from, never listed
        const ids = (page: { sessions: { id: string }[] }) => page.sessions.map((s) => s.id);

        expect(ids(await history.pending(wallet, { limit: 10 }))).to.deep.equal([]);
        expect(ids(await history.pending(wallet, { limit: 10, includeOpen: true }))).to.deep.equal([a, b]);
        const first = await history.pending(wallet, { limit: 1, includeOpen: true });
        expect(first).to.include({ more: true });
        expect(ids(first)).to.deep.equal([a]);
        const rest = await history.pending(wallet, {
          limit: 1,
          includeOpen: true,
          after: first.sessions[0]!.watermark,
        });
        expect(ids(rest)).to.deep.equal([b]);

        await gina.client.json('POST', `/agents/${gina.agentId}/sessions/${b}/end`, {});
        const ended = await history.pending(wallet, { limit: 10 });
        expect(ids(ended)).to.deep.equal([b]);
        const watermark = ended.sessions[0]!.watermark;
        expect(ids(await history.pending(wallet, { limit: 10, after: watermark }))).to.deep.equal([]);

        // Session a changes after the watermark (a message, then its idle end): it comes next.
        await say(gina.client, gina.agentId, a, 'more words', 'a2');
        clock.advance(IDLE_SECONDS * 1000 + 1);
        const later = await history.pending(wallet, { limit: 10, after: watermark });
        expect(ids(later)).to.deep.equal([a]);
        expect(later.sessions[0]).to.include({ endReason: 'expired', userMessages: 2, lastSeq: 4 });
        const { messages, more } = await history.messages(wallet, a, { afterSeq: 0, limit: 10 });
        expect(more).to.equal(false);
        expect(messages.map((m) => [m.sessionId, m.seq, m.messageId, m.message.role])).to.deep.equal([
          [a, 1, 'a1', 'user'],
          [a, 2, 'a1', 'assistant'],
          [a, 3, 'a2', 'user'],
          [a, 4, 'a2', 'assistant'],
        ]);
        expect(
          ids(await history.pending(wallet, { limit: 10, after: later.sessions[0]!.watermark })),
        ).to.deep.equal([]);
        // Another wallet's sessions are never in this wallet's list, nor its messages readable.
        const other = await newUser(runtime.stack);
        expect(
          ids(await history.pending(other.wallet.address, { limit: 10, includeOpen: true })),
        ).to.deep.equal([]);
        let refused: unknown;
        await history
          .messages(other.wallet.address, a, { afterSeq: 0, limit: 10 })
          .catch((err) => (refused = err));
        expect(refused).to.have.nested.property('details.reason', 'session_not_found');
      });

      it('is the owner’s only (404 for another wallet) and refuses malformed input with a 400', async () => {
        const frank = await newUser(runtime.stack);
        const id = await session(frank.client, frank.agentId);
        await say(frank.client, frank.agentId, id, 'private words');
        const mallory = await newUser(runtime.stack);
        const base = `/agents/${frank.agentId}/sessions`;
        for (const [method, path] of [
          ['GET', base],
          ['GET', `${base}/${id}`],
          ['GET', `${base}/${id}/messages`],
          ['POST', `${base}/${id}/end`],
          ['DELETE', `${base}/${id}`],
        ] as const) {
          const res = await mallory.client.json(method, path, method === 'POST' ? {} : undefined);
          expect(res.status, `${method} ${path}`).to.equal(404);
          expect(JSON.stringify(res.body)).to.not.include('private words');
        }
        // Mallory's own agent does not reach Frank's session either.
        const own = await mallory.client.json('GET', `/agents/${mallory.agentId}/sessions/${id}/messages`);
        expect(own.status).to.equal(404);

        for (const query of [
          '?limit=0',
          '?limit=201',
          '?limit=ten',
          '?state=gone',
          '?cursor=bm90LWEtY3Vyc29y',
          '?order=desc',
        ]) {
          const res = await frank.client.json('GET', `${base}${query}`);
          expect(res.status, query).to.equal(400);
          expect(res.body.code).to.equal('invalid_request');
        }
        const messages = await frank.client.json('GET', `${base}/${id}/messages?limit=1`);
        expect(messages.body.messages).to.have.length(1);
        const otherSession = await session(frank.client, frank.agentId);
        const crossed = await frank.client.json(
          'GET',
          `${base}/${otherSession}/messages?cursor=${messages.body.nextCursor as string}`,
        );
        expect(crossed.status).to.equal(400);
        const rest = await frank.client.json(
          'GET',
          `${base}/${id}/messages?cursor=${messages.body.nextCursor as string}`,
        );
        expect((rest.body.messages as { seq: number }[]).map((m) => m.seq)).to.deep.equal([2]);
        const endBody = await frank.client.json('POST', `${base}/${id}/end`, { reason: 'bored' });
        expect(endBody.status).to.equal(400);
        expect((await frank.client.json('GET', `${base}/not-a-uuid/messages`)).status).to.equal(400);
      });
    });
  });
});
