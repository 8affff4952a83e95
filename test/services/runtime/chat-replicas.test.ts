import { randomUUID } from 'node:crypto';
import { expect } from 'chai';
import type { AuthPrincipal } from '../../../core/auth/index.ts';
import { ManualClock } from '../../../core/clock.ts';
import { databaseNowMs } from '../../../core/db/database.ts';
import { ChatService } from '../../../services/runtime/chat/chat.ts';
import { platformCost } from '../../../services/runtime/chat/cost.ts';
import { newWallet } from '../../core/auth/support.ts';
import { eventually } from '../../support/eventually.ts';
import { describeEachDatabase, stickyDatabase, type TestDatabase } from '../../support/kernel.ts';
import { heldOpen, inProcessGateway, recording, type StubTool } from './chat-in-process.ts';
import { readSse, runtimeClient, type SseEvent } from './chat-support.ts';
import { setOnChain } from './ledger/support.ts';
import { internalKeyStack, type Stack } from './support.ts';

const USD = 1_000_000n;
/** database.leaseSeconds: a claim on a session lasts 3 s unrenewed, renewed every second. */
const LEASE_SECONDS = 3;

type Runtime = Awaited<ReturnType<typeof internalKeyStack>>;
type Client = ReturnType<typeof runtimeClient>;

/**
 * Scale-out (issue #29, WP4): two runtimes on one database, as two replicas behind a load balancer.
 * A session answers one request at a time across them (a claim in its row, renewed while the answer
 * runs, free once its replica is dead or its time ran out); an answer whose replica dies is charged
 * what it recorded on its hold after each billed step; a client that lost its stream resends the same
 * message id, on any replica, and is told the session is busy, where the stored answer is, or that the
 * cut-off attempt was charged, never charged twice.
 */
describe('runtime chat across replicas: one request per session, a dead replica’s spend, the retry', function () {
  this.timeout(120_000);

  describeEachDatabase('chat replicas', (database) => {
    let sticky: ReturnType<typeof stickyDatabase>;
    let clock: ManualClock;
    let a: Runtime;
    let b: Runtime;
    /** Tool calls held open by a test: released after it, so no answer outlives its runtime. */
    let open: (() => void)[];

    const start = (db: TestDatabase, shared = true) =>
      internalKeyStack(db, {
        operatorKey: 'sk-internal-operator-key-r3pl',
        chat: {},
        clock,
        database: { shared, leaseSeconds: LEASE_SECONDS },
      });

    beforeEach(async () => {
      sticky = stickyDatabase(database);
      clock = new ManualClock();
      open = [];
      a = await start(sticky.database);
      b = await start(sticky.database);
    });
    afterEach(async () => {
      for (const release of open) release();
      await b?.close();
      await a?.close();
      await sticky.drop();
    });

    /** A funded wallet with an agent, and its client of runtime B's routes. */
    async function user() {
      const wallet = newWallet();
      const ledger = a.stack.runtime.ledger;
      await setOnChain(ledger.ledger, wallet.address, USD);
      const agentId = (await ledger.agents.create(wallet.address, { name: 'a', model: 'sigil-echo' })).id;
      const principal: AuthPrincipal = { address: wallet.address, method: 'jwt', operator: false };
      const onB = runtimeClient(b.stack.url('runtime'), await b.stack.signIn(wallet));
      return { account: wallet, wallet: wallet.address, agentId, principal, onB };
    }

    /** Runtime `on`'s chat with gateway tools that run in this process. */
    const chatOf = (on: Runtime, tools: Record<string, StubTool>) =>
      new ChatService({ ...on.stack.runtime.chat.deps(), gateway: inProcessGateway(tools) });

    /** A message answered on `chat` until its tool `slow__wait`, which the test holds open. */
    async function answering(
      chat: ChatService,
      who: Awaited<ReturnType<typeof user>>,
      sessionId: string,
      held: ReturnType<typeof heldOpen>,
      content = 'use tool slow__wait',
    ) {
      open.push(held.release);
      const prepared = await chat.prepare(who.principal, who.agentId, sessionId, { content, id: 'm1' });
      const events: SseEvent[] = [];
      const done = chat.run(who.principal, prepared, recording(events));
      await held.entered;
      return { prepared, events, done };
    }

    const message = (who: Awaited<ReturnType<typeof user>>, sessionId: string, id: string) =>
      who.onB.json('POST', `/agents/${who.agentId}/sessions/${sessionId}/messages`, { content: 'hello', id });

    const charges = async (stack: Stack, wallet: string) =>
      (
        (await stack.kernel
          .db('ledger_entries')
          .where({ wallet, kind: 'charge' })
          .orderBy('id')
          .select('idempotency_key', stack.kernel.db.raw('cast(amount as text) as amount'))) as {
          idempotency_key: string;
          amount: string;
        }[]
      ).map((row) => [row.idempotency_key, BigInt(row.amount)]);

    /** The session's claim, as stored. */
    const claimOf = async (stack: Stack, sessionId: string) =>
      (await stack.kernel
        .db('chat_sessions')
        .where({ id: sessionId })
        .first('answering_by', 'answering_claim', 'answering_until')) as {
        answering_by: string | null;
        answering_claim: string | null;
        answering_until: number | string | null;
      };

    /** Ends the claim's time now, by the database's clock (as if it had not been renewed for its lifetime). */
    const runOut = (stack: Stack, sessionId: string) =>
      stack.kernel
        .db('chat_sessions')
        .where({ id: sessionId })
        .update({ answering_until: databaseNowMs(stack.kernel.db) });

    it('B refuses a second message and a delete, and does not expire the session, while A answers; B’s resend after A stored it names the stored answer, charged once', async () => {
      const who = await user();
      const held = heldOpen();
      const chatA = chatOf(a, { slow__wait: held });
      const session = await chatA.openSession(who.wallet, who.agentId, { servers: ['slow'] });
      const running = await answering(chatA, who, session.id, held);

      expect(await claimOf(b.stack, session.id)).to.include({ answering_by: a.stack.kernel.replica.id });
      for (const id of ['m1', 'm2']) {
        const busy = await message(who, session.id, id);
        expect(busy.status, JSON.stringify(busy.body)).to.equal(409);
        expect(busy.body.details).to.deep.equal({ reason: 'session_busy' });
      }
      const deleted = await who.onB.json('DELETE', `/agents/${who.agentId}/sessions/${session.id}`);
      expect(deleted.status).to.equal(409);
      expect(deleted.body.details).to.deep.equal({ reason: 'session_busy' });
      const view = await who.onB.json('GET', `/agents/${who.agentId}/sessions/${session.id}`);
      expect(view.body).to.include({ busy: true, messages: 0 });
      const listed = await who.onB.json('GET', `/agents/${who.agentId}/sessions`);
      expect(listed.body.sessions[0]).to.include({ id: session.id, busy: true });
      // Idle past sessionIdleSeconds by the clock (the wallet's sign-in runs out too), it does not
      // end while A answers it.
      clock.advance(b.stack.kernel.config.runtime.chat.sessionIdleSeconds * 1000 + 1000);
      const sessionsOfB = b.stack.runtime.chat.sessions;
      const idle = await sessionsOfB.get(who.wallet, who.agentId, session.id);
      expect(idle.endedAt).to.equal(undefined);
      expect(await sessionsOfB.isBusy(idle)).to.equal(true);
      who.onB = runtimeClient(b.stack.url('runtime'), await b.stack.signIn(who.account));
      // What its first model turn used is on the hold already, for the sweep should A die now.
      const usage = running.events.find((e) => e.event === 'usage')!.data;
      const recorded = (await b.stack.runtime.ledger.holds.get(who.wallet, `chat:${session.id}:m1`))!;
      expect(recorded.settleCost).to.equal(
        platformCost('internal', BigInt(usage.baseLlmCost as string), 0).platformCost,
      );

      held.release();
      await running.done;
      const cost = running.events.find((e) => e.event === 'cost')!.data;
      expect(running.events.map((e) => e.event)).to.include('done');
      expect(cost.charged).to.equal(cost.platformCost);
      expect(await claimOf(b.stack, session.id)).to.deep.equal({
        answering_by: null,
        answering_claim: null,
        answering_until: null,
      });

      // The client lost its stream and resends on B: the answer is stored, and where it is is told.
      const resent = await message(who, session.id, 'm1');
      expect(resent.status).to.equal(409);
      expect(resent.body.details).to.include({
        reason: 'message_already_answered',
        messageId: 'm1',
        firstSeq: 1,
        lastSeq: 4,
      });
      const page = await who.onB.json(
        'GET',
        `/agents/${who.agentId}/sessions/${session.id}/messages?cursor=${resent.body.details.cursor}`,
      );
      const stored = page.body.messages as Record<string, unknown>[];
      expect(stored.map((m) => [m.seq, m.messageId, m.role])).to.deep.equal([
        [1, 'm1', 'user'],
        [2, 'm1', 'assistant'],
        [3, 'm1', 'tool'],
        [4, 'm1', 'assistant'],
      ]);
      expect(stored[3]).to.include({
        content: 'Tool slow__wait returned: slow__wait done',
        cost: cost.platformCost,
      });
      // Charged once: the settlement replaced the recorded cost, and the sweep finds nothing to do.
      const once = [[`charge:chat:${session.id}:m1`, BigInt(cost.platformCost as string)]];
      expect(await charges(b.stack, who.wallet)).to.deep.equal(once);
      clock.advance(b.stack.runtime.ledger.holds.ttlMs + 1000);
      expect(await b.stack.runtime.ledger.holds.releaseExpired()).to.equal(0);
      expect(await charges(b.stack, who.wallet)).to.deep.equal(once);
      expect(await b.stack.runtime.ledger.ledger.balance(who.wallet)).to.include({ heldSpend: 0n });

      // The session is free for B's next message.
      const chatB = chatOf(b, {});
      const next = await chatB.prepare(who.principal, who.agentId, session.id, {
        content: 'hello',
        id: 'm2',
      });
      const events: SseEvent[] = [];
      await chatB.run(who.principal, next, recording(events));
      expect(events.map((e) => e.event)).to.include('done');
      expect((await who.onB.json('GET', `/agents/${who.agentId}/sessions/${session.id}`)).body).to.include({
        messages: 2,
        busy: false,
      });
    });

    /** Sends a message on `client`'s runtime and reads its stream to the end: its events. */
    async function answered(client: Client, agentId: string, sessionId: string, id: string) {
      const res = await client.send('POST', `/agents/${agentId}/sessions/${sessionId}/messages`, {
        content: 'hello there',
        id,
      });
      expect(res.status, `POST message: ${res.status}`).to.equal(200);
      return (await readSse(res)).map((e) => e.event);
    }

    it('a claim whose replica died frees once its time ran out, or at once when the replica is gone', async () => {
      const who = await user();
      const { chat } = a.stack.runtime;
      /** A begins answering the session, then dies: no renewal, no finish. */
      const dies = async () => {
        const session = await chat.openSession(who.wallet, who.agentId, {});
        (await chat.sessions.begin(session, 'm1', { fresh: false })).claim.stop();
        return session.id;
      };
      const ranOut = await dies();
      expect((await message(who, ranOut, 'm1')).body.details).to.deep.equal({ reason: 'session_busy' });
      await runOut(b.stack, ranOut);
      expect(await answered(who.onB, who.agentId, ranOut, 'm1')).to.include('done');

      const deleted = await dies();
      expect((await who.onB.json('DELETE', `/agents/${who.agentId}/sessions/${deleted}`)).status).to.equal(
        409,
      );
      await runOut(b.stack, deleted);
      expect((await who.onB.json('DELETE', `/agents/${who.agentId}/sessions/${deleted}`)).status).to.equal(
        204,
      );

      // The process ends without releasing its claim: its heartbeat stops and its registration goes.
      const orphaned = await dies();
      expect((await message(who, orphaned, 'm1')).body.details).to.deep.equal({ reason: 'session_busy' });
      await a.stack.kernel.replica.close();
      expect(await b.stack.kernel.replica.alive(a.stack.kernel.replica.id)).to.equal(false);
      const view = await who.onB.json('GET', `/agents/${who.agentId}/sessions/${orphaned}`);
      expect(view.body).to.include({ busy: false });
      expect(await answered(who.onB, who.agentId, orphaned, 'm1')).to.include('done');
    });

    it('on one machine (database.shared false) a runtime takes up at once a session its predecessor was answering', async () => {
      const who = await user();
      const { chat } = a.stack.runtime;
      const session = await chat.openSession(who.wallet, who.agentId, {});
      (await chat.sessions.begin(session, 'm1', { fresh: false })).claim.stop();
      // The predecessor's heartbeat is fresh, but on one machine it cannot be answering anything.
      const successor = await start(sticky.database, false);
      try {
        const client = runtimeClient(
          successor.stack.url('runtime'),
          await successor.stack.signIn(who.account),
        );
        expect(await answered(client, who.agentId, session.id, 'm1')).to.include('done');
      } finally {
        await successor.close();
      }
    });

    it('renews the claim while the answer runs; an answer whose claim was taken stops, charged what it used, not stored', async () => {
      const who = await user();
      const held = heldOpen();
      const chatA = chatOf(a, { slow__wait: held });
      const session = await chatA.openSession(who.wallet, who.agentId, { servers: ['slow'] });
      const running = await answering(chatA, who, session.id, held);
      const first = Number((await claimOf(b.stack, session.id)).answering_until);
      await eventually(
        'a renewal of the claim',
        async () => Number((await claimOf(b.stack, session.id)).answering_until) > first,
      );
      // A stalled past its claim and B's request took the session: A's next renewal finds it lost.
      await b.stack.kernel
        .db('chat_sessions')
        .where({ id: session.id })
        .update({ answering_by: b.stack.kernel.replica.id, answering_claim: randomUUID() });
      await running.done;
      const of = (name: string) => running.events.find((e) => e.event === name)?.data;
      expect(of('error')).to.deep.include({ code: 'unavailable', details: { reason: 'session_claim_lost' } });
      expect(of('done')).to.equal(undefined);
      const cost = of('cost')!;
      expect(BigInt(cost.platformCost as string) > 0n).to.equal(true);
      expect(cost.charged).to.equal(cost.platformCost);
      const page = await who.onB.json('GET', `/agents/${who.agentId}/sessions/${session.id}/messages`);
      expect(page.body.messages).to.deep.equal([]);
      expect((await claimOf(b.stack, session.id)).answering_by).to.equal(b.stack.kernel.replica.id);
    });

    it('an answer whose replica died is charged what it recorded, by the sweep or by a resend, once', async () => {
      const who = await user();
      const ledger = b.stack.runtime.ledger;
      /** A answers `use tool paid__call then use tool slow__wait` and dies in the second call. */
      const dies = async () => {
        const held = heldOpen();
        const chatA = chatOf(a, {
          paid__call: { run: async () => undefined, billed: true },
          slow__wait: held,
        });
        const session = await chatA.openSession(who.wallet, who.agentId, { servers: ['paid', 'slow'] });
        const running = await answering(
          chatA,
          who,
          session.id,
          held,
          'use tool paid__call then use tool slow__wait',
        );
        running.prepared.claim.stop();
        const usage = running.events.find((e) => e.event === 'usage')!.data;
        const key = `chat:${session.id}:m1`;
        // The model turn and the paid call that ran: what it used when it died.
        const used = platformCost('internal', BigInt(usage.baseLlmCost as string), 1).platformCost;
        expect((await ledger.holds.get(who.wallet, key))?.settleCost).to.equal(used);
        return { session, running, held, key, used };
      };
      const swept = await dies();
      const resent = await dies();
      expect(await charges(b.stack, who.wallet)).to.deep.equal([]);

      // Resent on B once A's claim ran out: what A used is charged now, and the id is spent.
      await runOut(b.stack, resent.session.id);
      const refused = await message(who, resent.session.id, 'm1');
      expect(refused.status).to.equal(409);
      expect(refused.body.details).to.include({ reason: 'already_charged' });
      expect(await charges(b.stack, who.wallet)).to.deep.equal([[`charge:${resent.key}`, resent.used]]);

      // The other hold runs out: B's sweep charges what A recorded instead of releasing it.
      clock.advance(ledger.holds.ttlMs + 1000);
      expect(await ledger.holds.releaseExpired()).to.equal(1);
      const both = [
        [`charge:${resent.key}`, resent.used],
        [`charge:${swept.key}`, swept.used],
      ];
      expect(await charges(b.stack, who.wallet)).to.deep.equal(both);
      await runOut(b.stack, swept.session.id);
      expect((await message(who, swept.session.id, 'm1')).body.details).to.include({
        reason: 'already_charged',
      });

      // Were A only paused, its answers go on, find their charge made, and charge nothing more.
      for (const { held, running } of [swept, resent]) {
        held.release();
        await running.done;
        expect(running.events.find((e) => e.event === 'done')).to.equal(undefined);
      }
      expect(await charges(b.stack, who.wallet)).to.deep.equal(both);
      expect(await ledger.ledger.balance(who.wallet)).to.include({ heldSpend: 0n });
    });
  });
});
