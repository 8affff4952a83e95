import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type { AuthPrincipal } from '../../../core/auth/index.ts';
import { dialectOf } from '../../../core/db/database.ts';
import { newWallet } from '../../core/auth/support.ts';
import { setOnChain } from './ledger/support.ts';
import { describeEachDatabase, stickyDatabase } from '../../support/kernel.ts';
import { readSse, runtimeClient, storeAndUnlock, type SseEvent } from './chat-support.ts';
import { recording } from './chat-in-process.ts';
import { pluginsWithLocalProvider, Stack } from './support.ts';

/**
 * What a chat turn asks of the database (issue 30: the turn's cost is its statements): the statements
 * the runtime sends from a message's request to its stream's end, those before the first token apart.
 */
describeEachDatabase('runtime chat: the statements of a turn', (database) => {
  const sticky = stickyDatabase(database);
  let dir: string;
  let stack: Stack;
  let client: ReturnType<typeof runtimeClient>;
  let agentId: string;
  /** The wallet's principal, as its session JWT makes it (the vault is unlocked in that session). */
  let principal: AuthPrincipal;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'sigil-chat-statements-'));
    stack = await Stack.start({
      database: sticky.database,
      config: { vault: { persistenceDir: dir }, plugins: pluginsWithLocalProvider() },
    });
    const wallet = newWallet();
    const jwt = await stack.signIn(wallet);
    const claims = JSON.parse(Buffer.from(jwt.split('.')[1] as string, 'base64url').toString()) as {
      jti: string;
      exp: number;
    };
    principal = {
      address: wallet.address,
      method: 'jwt',
      operator: false,
      session: { id: claims.jti, expiresAt: new Date(claims.exp * 1000) },
    };
    client = runtimeClient(stack.url('runtime'), jwt);
    await setOnChain(stack.runtime.ledger.ledger, wallet.address, 1_000_000n);
    await storeAndUnlock(client, wallet, 'PROVIDER_API_KEY', 'sk-wallet-own-key');
    agentId = (await client.json('POST', '/agents', { name: 'a', model: 'sigil-echo' })).body.id as string;
  });
  after(async () => {
    await stack?.close();
    rmSync(dir, { recursive: true, force: true });
    await sticky.drop();
  });

  /** One message in `sessionId`: its events, and the statements before its first token and after. */
  async function turn(sessionId: string, body: Record<string, unknown>) {
    const statements: string[] = [];
    let beforeToken: string[] | undefined;
    // As SQLite writes them, to match one way: PostgreSQL's "names" and $1 parameters as `names` and ?.
    const record = (query: { sql: string }) =>
      statements.push(query.sql.replace(/"/g, '`').replace(/\$\d+/g, '?'));
    stack.kernel.db.on('query', record);
    try {
      const res = await client.send('POST', `/agents/${agentId}/sessions/${sessionId}/messages`, body);
      expect(res.status).to.equal(200);
      const events = await readSse(res, (event: SseEvent) => {
        if (event.event === 'text-delta') beforeToken ??= [...statements];
        return event.event === 'done';
      });
      return { events, beforeToken: beforeToken ?? [], all: statements };
    } finally {
      stack.kernel.db.off('query', record);
    }
  }

  /** Like `turn`, recording on until self-improvement's schedule step after the turn has written. */
  async function turnAndSchedule(sessionId: string) {
    const statements: string[] = [];
    const record = (query: { sql: string }) => statements.push(query.sql.replace(/"/g, '`'));
    stack.kernel.db.on('query', record);
    try {
      const res = await client.send('POST', `/agents/${agentId}/sessions/${sessionId}/messages`, {
        content: 'hello there',
      });
      expect(res.status).to.equal(200);
      const events = await readSse(res);
      expect(events.at(-1)?.event).to.equal('done');
      await stack.runtime.reflect.scheduled();
      const count = (table: string) =>
        statements.filter((sql) => sql.startsWith('select') && sql.includes(`\`${table}\``)).length;
      return {
        settings: count('wallet_settings'),
        learnings: count('reflect_learnings'),
        skills: count('reflect_skills'),
        scheduleWrites: statements.filter((sql) => /^insert into `reflect_schedules`/.test(sql)).length,
      };
    } finally {
      stack.kernel.db.off('query', record);
    }
  }

  /** What a turn and its schedule step read of self-improvement, and its schedule writes. */
  const reads = (settings: number, learnings: number, skills: number, scheduleWrites: number) => ({
    settings,
    learnings,
    skills,
    scheduleWrites,
  });

  it("self-improvement's settings and memory are read once a few seconds a wallet: a change made here shows at the next message, another replica's within contextCacheSeconds", async () => {
    const cacheMs = stack.kernel.config.runtime.selfImprovement.contextCacheSeconds * 1000;
    expect(cacheMs).to.equal(5000);
    stack.clock.advance(cacheMs);
    // Read once for the turn's context; the schedule step after it does not read the settings again.
    expect(await turnAndSchedule(await open())).to.deep.equal(reads(1, 1, 1, 1));
    // The wallet's schedule row is known here to exist: a daily schedule is not written again.
    expect(await turnAndSchedule(await open())).to.deep.equal(reads(0, 0, 0, 0));
    const status = await client.json('GET', '/wallet/self-improvement/status');
    expect(status.body.nextRunAt).to.be.a('string');
    // Changed here: the next message reads the new settings (and, without chats' use, no memory).
    const patched = await client.json('PATCH', '/wallet/settings', {
      selfImprovement: { useInChats: false },
    });
    expect(patched.status).to.equal(200);
    expect(await turnAndSchedule(await open())).to.deep.equal(reads(1, 0, 0, 0));
    // Changed by another replica (its own write, not this process's): seen once cacheMs has passed.
    await stack.kernel.db('wallet_settings').update({
      document: JSON.stringify({ selfImprovement: { enabled: true, useInChats: true, schedule: 'daily' } }),
    });
    expect(await turnAndSchedule(await open())).to.deep.equal(reads(0, 0, 0, 0));
    stack.clock.advance(cacheMs);
    expect(await turnAndSchedule(await open())).to.deep.equal(reads(1, 1, 1, 0));
  });

  const open = async () => (await client.json('POST', `/agents/${agentId}/sessions`, {})).body.id as string;
  /** A read of what is stored of a message id: its answered messages, its streams' events. */
  const earlierAttempts = (sql: string) => /^select .*(chat_answers|min\(.seq.\))/.test(sql);

  it('a message without an id looks for no earlier attempt at it; its events are numbered from 1 and resume', async () => {
    const sessionId = await open();
    const { events, beforeToken, all } = await turn(sessionId, { content: 'hello there' });
    expect(events.at(-1)?.event).to.equal('done');
    expect(events.map((event) => Number(event.id))).to.deep.equal(events.map((_, i) => i + 1));
    // Neither before the first token nor when the answer is stored.
    expect(all.filter(earlierAttempts)).to.deep.equal([]);
    // The session is read by the statement that claims it: no read of its own.
    expect(beforeToken.filter((sql) => /^select .* from .chat_sessions./.test(sql))).to.deep.equal([]);
    const claims = beforeToken.filter((sql) => /^update .chat_sessions. set .answering_by./.test(sql));
    expect(claims).to.have.length(1);
    expect(claims[0]).to.match(/returning \*$/);
    // The hold, taken a moment before the first model turn, is not refreshed before it.
    expect(
      beforeToken.filter((sql) => /^update .ledger_holds. set .expires_at. = \?/.test(sql)),
    ).to.deep.equal([]);
    // The append reads no session: its update checks the claim and answers the row it wrote.
    const appendsSession = (sql: string) => /^update .chat_sessions. set .user_messages./.test(sql);
    expect(all.filter(appendsSession)).to.have.length(1);
    expect(all.filter(appendsSession)[0]).to.match(
      /where .id. = \? and .answering_claim. = \? returning \*$/,
    );
    expect(
      all.filter((sql) => /^select \* from .chat_sessions. where .id. = \? limit/.test(sql)),
    ).to.deep.equal([]);
    // The answer's end (its last events), stored in the append's transaction: no BEGIN of its own.
    const stored = all.filter((sql) => /insert into .chat_answer_events./.test(sql));
    const append = all.findIndex(appendsSession);
    const appendEnd = all.indexOf('COMMIT;', append);
    expect(all.slice(append, appendEnd).filter((sql) => /^BEGIN/.test(sql))).to.deep.equal([]);
    expect(all.slice(append, appendEnd)).to.include(stored.at(-1));
    // The first write of its events is, on PostgreSQL, one statement with the answer's row. (How many
    // writes there are depends on the turn's length: the log also writes every 50 ms.)
    const postgres = dialectOf(stack.kernel.db) === 'postgres';
    expect(/^with .answer. as \(insert into .chat_answers./.test(stored[0] ?? '')).to.equal(postgres);
    const messageId = events.at(-1)?.data.messageId as string;
    const replayed = await readSse(
      await client.send('GET', `/agents/${agentId}/sessions/${sessionId}/messages/${messageId}/events`),
    );
    expect(replayed).to.deep.equal(events);
  });

  it('an answer whose append is refused stores none of its end: its stream ends with error and cost, no done, and a resume replays just that', async () => {
    const sessionId = await open();
    const { chat } = stack.runtime;
    const prepared = await chat.prepare(principal, agentId, sessionId, { content: 'hello there' });
    // Another request took the session and this one no longer renews its claim: its append is refused.
    prepared.claim.stop();
    await stack.kernel.db('chat_sessions').where({ id: sessionId }).update({ answering_claim: randomUUID() });
    const events: SseEvent[] = [];
    await chat.run(principal, prepared, recording(events));
    const names = events.map((event) => event.event);
    expect(names.slice(-2)).to.deep.equal(['error', 'cost']);
    expect(names).to.not.include('done');
    expect(events.at(-2)?.data).to.deep.include({
      code: 'unavailable',
      details: { reason: 'session_claim_lost' },
    });
    expect(events.at(-1)?.data.charged).to.equal(events.at(-1)?.data.platformCost);
    const replayed = await readSse(
      await client.send(
        'GET',
        `/agents/${agentId}/sessions/${sessionId}/messages/${prepared.messageId}/events`,
      ),
    );
    expect(replayed).to.deep.equal(events);
    const page = await client.json('GET', `/agents/${agentId}/sessions/${sessionId}/messages`);
    expect(page.body.messages).to.deep.equal([]);
  });

  it('the claim of a message records the session’s use; a session without messages is not read for its history, one with them is', async () => {
    const sessionId = await open();
    const opened = await client.json('GET', `/agents/${agentId}/sessions/${sessionId}`);
    const historyRead = (sql: string) => /from .chat_messages. where .session_id. = \? order by/.test(sql);
    const separateTouch = (sql: string) => /^update .chat_sessions. set .last_used_at. = \? where/.test(sql);
    stack.clock.advance(1000);
    const first = await turn(sessionId, { content: 'hello there' });
    expect(first.beforeToken.filter(historyRead)).to.deep.equal([]);
    expect(first.beforeToken.filter(separateTouch)).to.deep.equal([]);
    const used = await client.json('GET', `/agents/${agentId}/sessions/${sessionId}`);
    expect(Date.parse(used.body.lastUsedAt as string)).to.equal(
      Date.parse(opened.body.lastUsedAt as string) + 1000,
    );
    const second = await turn(sessionId, { content: 'and again' });
    expect(second.events.at(-1)?.event).to.equal('done');
    expect(second.beforeToken.filter(historyRead)).to.have.length(1);
    const stored = await client.json('GET', `/agents/${agentId}/sessions/${sessionId}/messages`);
    expect(stored.body.messages.map((m: { content: string }) => m.content)).to.deep.equal([
      'hello there',
      'hello there',
      'and again',
      'and again',
    ]);
  });

  it('a message with its own id looks for earlier attempts, and a second one of that id is refused', async () => {
    const sessionId = await open();
    const first = await turn(sessionId, { content: 'hello there', id: 'm-1' });
    expect(first.events.at(-1)?.event).to.equal('done');
    // Before the claim's use is recorded, and again when the answer is stored.
    expect(first.beforeToken.filter(earlierAttempts)).to.have.length.greaterThan(0);
    expect(first.all.filter((sql) => /min\(.seq.\)/.test(sql))).to.have.length(2);
    const again = await client.json('POST', `/agents/${agentId}/sessions/${sessionId}/messages`, {
      content: 'hello there',
      id: 'm-1',
    });
    expect(again.status).to.equal(409);
    expect(again.body.details.reason).to.equal('message_already_answered');
  });
});
