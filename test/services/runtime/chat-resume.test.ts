import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import type { AuthPrincipal } from '../../../core/auth/index.ts';
import { ManualClock } from '../../../core/clock.ts';
import { ChatService } from '../../../services/runtime/chat/chat.ts';
import { newWallet } from '../../core/auth/support.ts';
import { eventually } from '../../support/eventually.ts';
import { describeEachDatabase, stickyDatabase } from '../../support/kernel.ts';
import { heldOpen, inProcessGateway, recording, type StubTool } from './chat-in-process.ts';
import { readSse, runtimeClient, type SseEvent } from './chat-support.ts';
import { setOnChain } from './ledger/support.ts';
import { internalKeyStack, type Stack } from './support.ts';

const USD = 1_000_000n;
/** database.leaseSeconds: a claim on a session lasts 3 s unrenewed. */
const LEASE_SECONDS = 3;
/** runtime.chat.resumeGraceSeconds: an answer whose client went waits this long for a resume. */
const GRACE_SECONDS = 1;
/** sigil-slow counts one number every 50 ms: 40 numbers take 2 s, past the grace. */
const SLOW_NUMBERS = 40;
const DATA_KEY = { id: 'k1', key: randomBytes(32).toString('base64') };

type Runtime = Awaited<ReturnType<typeof internalKeyStack>>;
type Client = ReturnType<typeof runtimeClient>;

/**
 * Scale-out (issue #29 §2): a chat answer's events are stored as they are sent, sealed like the
 * history, each with its number as the SSE id, so a stream cut on one replica resumes on another
 * (`GET …/messages/:messageId/events` with Last-Event-ID): the stored events after it, then the new
 * ones while the answer runs, until its end; an answer whose replica died ends the stream with an error.
 */
describe('runtime chat: a stream resumed on another replica from its stored events', function () {
  this.timeout(120_000);

  describeEachDatabase('chat resume', (database) => {
    let sticky: ReturnType<typeof stickyDatabase>;
    let clock: ManualClock;
    let a: Runtime;
    let b: Runtime;
    let open: (() => void)[];

    beforeEach(async () => {
      sticky = stickyDatabase(database);
      clock = new ManualClock();
      open = [];
      const start = () =>
        internalKeyStack(sticky.database, {
          operatorKey: 'sk-internal-operator-key-r35m',
          chat: { maxOutputTokens: SLOW_NUMBERS, resumeGraceSeconds: GRACE_SECONDS },
          history: { dataKeys: [DATA_KEY] },
          clock,
          database: { shared: true, leaseSeconds: LEASE_SECONDS },
        });
      a = await start();
      b = await start();
    });
    afterEach(async () => {
      for (const release of open) release();
      await b?.close();
      await a?.close();
      await sticky.drop();
    });

    /** A funded wallet with an agent on `model`, a session, and its clients of A's and B's routes. */
    async function user(model = 'sigil-slow') {
      const wallet = newWallet();
      await setOnChain(a.stack.runtime.ledger.ledger, wallet.address, USD);
      const agentId = (await a.stack.runtime.ledger.agents.create(wallet.address, { name: 'a', model })).id;
      const session = await a.stack.runtime.chat.openSession(wallet.address, agentId, {});
      const principal: AuthPrincipal = { address: wallet.address, method: 'jwt', operator: false };
      const client = async (stack: Stack) => runtimeClient(stack.url('runtime'), await stack.signIn(wallet));
      const base = `/agents/${agentId}/sessions/${session.id}`;
      return {
        wallet: wallet.address,
        agentId,
        session,
        principal,
        base,
        onA: await client(a.stack),
        onB: await client(b.stack),
      };
    }

    /** The message's stream resumed on `client`'s runtime, after `lastEventId` (none: from its start). */
    async function resumed(client: Client, path: string, lastEventId?: string): Promise<SseEvent[]> {
      const res = await fetchEvents(client, path, lastEventId);
      expect(res.status, `GET ${path}: ${res.status}`).to.equal(200);
      return readSse(res);
    }
    const fetchEvents = (client: Client, path: string, lastEventId?: string) =>
      client.send(
        'GET',
        path,
        undefined,
        undefined,
        lastEventId === undefined ? {} : { 'last-event-id': lastEventId },
      );

    const ids = (events: readonly SseEvent[]) => events.map((e) => Number(e.id));
    const text = (events: readonly SseEvent[]) =>
      events
        .filter((e) => e.event === 'text-delta')
        .map((e) => e.data.text)
        .join('');

    /** `count` sent to A as message m1 (sigil-slow: SLOW_NUMBERS numbers), its stream open. */
    async function countingOnA(who: Awaited<ReturnType<typeof user>>) {
      const abort = new AbortController();
      const res = await who.onA.send(
        'POST',
        `${who.base}/messages`,
        { content: 'count', id: 'm1' },
        abort.signal,
      );
      expect(res.status).to.equal(200);
      return { res, abort };
    }

    it('a stream cut mid-answer on A resumes on B with Last-Event-ID: exactly the rest, the answer going on past the grace while B follows; then any tail replays', async () => {
      const who = await user();
      const { res, abort } = await countingOnA(who);
      const events = `${who.base}/messages/m1/events`;
      expect(res.headers.get('content-location')).to.equal(events);
      let deltas = 0;
      const before = await readSse(res, (e) => e.event === 'text-delta' && ++deltas >= 5, abort);
      const last = before.at(-1)!.id!;

      const rest = await resumed(who.onB, events, last);
      const whole = [...before, ...rest];
      // Numbered 1, 2, … with no gap and no event twice, and the end: usage, cost, done.
      expect(ids(whole)).to.deep.equal(whole.map((_, i) => i + 1));
      expect(rest.slice(-3).map((e) => e.event)).to.deep.equal(['usage', 'cost', 'done']);
      expect(rest.some((e) => e.event === 'error')).to.equal(false);
      // The whole answer, though its client went for longer than the grace: B followed it.
      const stored = await who.onB.json('GET', `${who.base}/messages`);
      const answer = stored.body.messages.find((m: { role: string }) => m.role === 'assistant');
      expect(text(whole)).to.equal(answer.content);
      expect(answer.content.trim().split(' ')).to.have.length(SLOW_NUMBERS);
      const cost = rest.find((e) => e.event === 'cost')!.data;
      expect(cost.charged).to.equal(answer.cost);

      // After the end, any replica replays: from the start, from an id (header or ?after=), or nothing after the last.
      expect(await resumed(who.onA, events)).to.deep.equal(whole);
      expect(await resumed(who.onB, events, '10')).to.deep.equal(whole.slice(10));
      expect(await readSse(await who.onB.send('GET', `${events}?after=20`))).to.deep.equal(whole.slice(20));
      expect(await resumed(who.onB, events, String(whole.length))).to.deep.equal([]);
    });

    it('a stream cut before its first event resumes on B from the start', async () => {
      const who = await user();
      const { abort } = await countingOnA(who);
      abort.abort();
      const whole = await resumed(who.onB, `${who.base}/messages/m1/events`);
      expect(ids(whole)).to.deep.equal(whole.map((_, i) => i + 1));
      expect(whole.at(-1)?.event).to.equal('done');
      expect(text(whole).trim().split(' ')).to.have.length(SLOW_NUMBERS);
    });

    it('a runtime stopping ends the streams it follows without a last event; the client resumes on the other', async () => {
      const who = await user();
      const { res, abort } = await countingOnA(who);
      let deltas = 0;
      const before = await readSse(res, (e) => e.event === 'text-delta' && ++deltas >= 3, abort);
      const events = `${who.base}/messages/m1/events`;
      let stopping = false;
      const onB = await readSse(await fetchEvents(who.onB, events, before.at(-1)!.id), () => {
        if (!stopping) b.stack.runtime.closing();
        stopping = true;
        return false;
      });
      expect(onB.length).to.be.above(0);
      expect(onB.map((e) => e.event)).to.not.include.members(['done', 'error', 'cost']);
      const rest = await resumed(who.onA, events, onB.at(-1)!.id);
      const whole = [...before, ...onB, ...rest];
      expect(ids(whole)).to.deep.equal(whole.map((_, i) => i + 1));
      expect(whole.at(-1)?.event).to.equal('done');
    });

    it('only the session’s wallet resumes it; an unknown message or a malformed id is refused, nothing opened', async () => {
      const who = await user('sigil-echo');
      const res = await who.onB.send('POST', `${who.base}/messages`, { content: 'hello there', id: 'm1' });
      await readSse(res);
      const events = `${who.base}/messages/m1/events`;

      const other = await user('sigil-echo');
      const stolen = await other.onB.json('GET', events);
      expect(stolen.status).to.equal(404);
      expect(stolen.body.details).to.deep.equal({ reason: 'session_not_found' });
      const unknown = await who.onB.json('GET', `${who.base}/messages/m2/events`);
      expect(unknown.status).to.equal(404);
      expect(unknown.body.details).to.deep.equal({ reason: 'stream_not_found' });
      const bad = await fetchEvents(who.onB, events, 'seven');
      expect(bad.status).to.equal(400);
      const query = await who.onB.json('GET', `${events}?after=-1`);
      expect(query.status).to.equal(400);
      const extra = await who.onB.json('GET', `${events}?from=1`);
      expect(extra.status).to.equal(400);
    });

    /**
     * A answers `use tool slow__wait` through gateway tools of this process, stored up to its tool
     * call, and dies in the call: its claim is no longer renewed. `finish` lets it go on, as were A
     * only paused, and waits for its end.
     */
    async function dying(who: Awaited<ReturnType<typeof user>>) {
      const held = heldOpen();
      open.push(held.release);
      const chatA = new ChatService({
        ...a.stack.runtime.chat.deps(),
        gateway: inProcessGateway({ slow__wait: held } as Record<string, StubTool>),
      });
      const session = await chatA.openSession(who.wallet, who.agentId, { servers: ['slow'] });
      const prepared = await chatA.prepare(who.principal, who.agentId, session.id, {
        content: 'use tool slow__wait',
        id: 'm1',
      });
      const sent: SseEvent[] = [];
      const running = chatA.run(who.principal, prepared, recording(sent));
      await held.entered;
      const toolCall = sent.find((e) => e.event === 'tool-call')!;
      await eventually('the tool call stored', async () => {
        const row = await b.stack.kernel
          .db('chat_answer_events')
          .where({ answer_id: prepared.claim.id })
          .max({ last: 'last_seq' })
          .first();
        return Number(row?.last) >= Number(toolCall.id);
      });
      prepared.claim.stop();
      const finish = async () => {
        held.release();
        await running;
      };
      return { base: `/agents/${who.agentId}/sessions/${session.id}`, sent, finish };
    }

    it('an answer whose replica died ends the resumed stream with an answer_lost error after what it stored; its resend follows the retry rules', async () => {
      const who = await user('sigil-echo');
      const { base, sent, finish } = await dying(who);
      // Its registration goes too (as at a stop, or once its heartbeat is old enough).
      await a.stack.kernel.replica.close();
      const lost = await resumed(who.onB, `${base}/messages/m1/events`);
      expect(lost.slice(0, -1)).to.deep.equal(sent);
      expect(lost.at(-1)).to.deep.include({ event: 'error' });
      expect(lost.at(-1)!.id).to.equal(undefined);
      expect(lost.at(-1)!.data).to.deep.include({ code: 'unavailable', details: { reason: 'answer_lost' } });
      // Resent with the same id: it had used a model turn, so it is charged and refused as such.
      const resent = await who.onB.json('POST', `${base}/messages`, {
        content: 'use tool slow__wait',
        id: 'm1',
      });
      expect(resent.status).to.equal(409);
      expect(resent.body.details).to.include({ reason: 'already_charged' });
      // Were A only paused, its answer goes on and ends, charged nothing more (chat-replicas.test.ts).
      await finish();
    });

    it('stores the events sealed under the session’s data key: a canary of the prompt and the answer is nowhere in the table', async () => {
      const who = await user('sigil-echo');
      const canary = `canary-${randomBytes(8).toString('hex')}`;
      const res = await who.onB.send('POST', `${who.base}/messages`, {
        content: `say ${canary} twice`,
        id: 'm1',
      });
      const live = await readSse(res);
      expect(text(live)).to.include(canary);
      const rows = (await b.stack.kernel.db('chat_answer_events')) as {
        sealed: boolean | number;
        events: string;
      }[];
      expect(rows.length).to.be.above(0);
      for (const row of rows) {
        expect(Boolean(row.sealed)).to.equal(true);
        expect(JSON.stringify(row)).to.not.include(canary);
        expect(JSON.stringify(row)).to.not.include('text-delta');
      }
      const answers = await b.stack.kernel.db('chat_answers');
      expect(JSON.stringify(answers)).to.not.include(canary);
      // Opened again for the wallet on the other replica.
      expect(await resumed(who.onA, `${who.base}/messages/m1/events`)).to.deep.equal(live);
    });

    it('keeps events as a resume buffer: gone with the session’s DELETE, and streamRetentionSeconds after the end', async () => {
      const who = await user('sigil-echo');
      const events = `${who.base}/messages/m1/events`;
      await readSse(await who.onB.send('POST', `${who.base}/messages`, { content: 'hello there', id: 'm1' }));
      const count = async (table: string) =>
        Number((await b.stack.kernel.db(table).count({ n: '*' }).first())?.n);
      const { answers } = b.stack.runtime.chat.deps();
      const retention = b.stack.kernel.config.runtime.chat.streamRetentionSeconds * 1000;

      clock.advance(retention - 1000);
      expect(await answers.sweep()).to.equal(0);
      expect((await fetchEvents(who.onB, events)).status).to.equal(200);
      clock.advance(2000);
      expect(await answers.sweep()).to.equal(1);
      expect(await count('chat_answers')).to.equal(0);
      expect(await count('chat_answer_events')).to.equal(0);
      const gone = await who.onB.json('GET', events);
      expect(gone.status).to.equal(404);
      // The answer itself stays in the history.
      const stored = await who.onB.json('GET', `${who.base}/messages`);
      expect(stored.body.messages).to.have.length(2);

      const again = await user('sigil-echo');
      await readSse(
        await again.onB.send('POST', `${again.base}/messages`, { content: 'hello there', id: 'm1' }),
      );
      expect(await count('chat_answer_events')).to.be.above(0);
      expect((await again.onB.json('DELETE', again.base)).status).to.equal(204);
      expect(await count('chat_answers')).to.equal(0);
      expect(await count('chat_answer_events')).to.equal(0);
    });

    it('an answer that never ended (its replica died) is deleted once its claim is gone and it began streamRetentionSeconds ago', async () => {
      const who = await user('sigil-echo');
      const { base, finish } = await dying(who);
      const { answers } = b.stack.runtime.chat.deps();
      clock.advance(b.stack.kernel.config.runtime.chat.streamRetentionSeconds * 1000 + 1000);
      expect(await answers.sweep(), 'its claim is live').to.equal(0);
      const sessionId = base.split('/').at(-1);
      await b.stack.kernel.db('chat_sessions').where({ id: sessionId }).update({ answering_until: 0 });
      expect(await answers.sweep()).to.equal(1);
      expect((await who.onB.json('GET', `${base}/messages/m1/events`)).status).to.equal(404);
      await finish();
    });
  });
});
