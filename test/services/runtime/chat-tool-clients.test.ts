import { expect } from 'chai';
import { ManualClock } from '../../../core/clock.ts';
import type { ChatSession } from '../../../services/runtime/chat/sessions.ts';
import { ToolClients } from '../../../services/runtime/chat/tool-clients.ts';

/** What ToolClients keeps: here a client that only knows whether it was closed, and how often. */
class Client {
  closed = 0;
  constructor(readonly session: string) {}
  async close(): Promise<void> {
    this.closed += 1;
  }
}

const IDLE_MS = 60_000;
const signal = new AbortController().signal;
const sessionOf = (id: string) =>
  ({ id, wallet: '0x00000000000000000000000000000000000000a1' }) as ChatSession;

function clients(maxClients = 10) {
  const clock = new ManualClock();
  const opened: Client[] = [];
  const pool = new ToolClients<Client>({
    open: async (session) => {
      const client = new Client(session.id);
      opened.push(client);
      return client;
    },
    idleMs: IDLE_MS,
    maxClients,
    clock,
  });
  /** One message of a session: lease its client, then release it. */
  const message = async (id: string, healthy = true) => {
    const lease = await pool.lease(sessionOf(id), signal);
    await lease.release(healthy);
    return lease.tools;
  };
  return { clock, opened, pool, message };
}

/** The chat's per-session gateway clients (issue 22, point 5): reuse, idle expiry, cap, failures. */
describe('runtime chat: one gateway client per chat session', () => {
  it('serves every message of a session with one client, and each session with its own', async () => {
    const { opened, pool, message } = clients();
    const first = await message('a');
    expect(await message('a')).to.equal(first);
    expect(await message('a')).to.equal(first);
    expect(await message('b')).to.not.equal(first);
    expect(opened.map((c) => c.session)).to.deep.equal(['a', 'b']);
    expect(opened.map((c) => c.closed)).to.deep.equal([0, 0]);
    expect(pool.size).to.equal(2);
  });

  it('closes a client idle for idleMs; its session connects again on its next message', async () => {
    const { clock, opened, pool, message } = clients();
    const first = await message('a');
    clock.advance(IDLE_MS - 1);
    expect(await message('a')).to.equal(first);
    clock.advance(IDLE_MS + 1);
    await message('b');
    expect(first.closed).to.equal(1);
    expect(pool.size).to.equal(1);
    const again = await message('a');
    expect(again).to.not.equal(first);
    expect(opened).to.have.length(3);
  });

  it('never closes a client while a message uses it, however long that message runs', async () => {
    const { clock, pool, message } = clients();
    const running = await pool.lease(sessionOf('a'), signal);
    clock.advance(10 * IDLE_MS);
    await message('b');
    expect(running.tools.closed).to.equal(0);
    await running.release(true);
    expect(running.tools.closed).to.equal(0);
    expect((await pool.lease(sessionOf('a'), signal)).tools).to.equal(running.tools);
  });

  it('keeps at most maxClients, closing the least recently used first', async () => {
    const { opened, pool, message } = clients(2);
    const a = await message('a');
    const b = await message('b');
    await message('a');
    await message('c');
    expect(b.closed, 'b was used least recently').to.equal(1);
    expect(a.closed).to.equal(0);
    expect(pool.size).to.equal(2);
    await message('b');
    expect(a.closed, 'then a').to.equal(1);
    expect(opened.map((c) => c.session)).to.deep.equal(['a', 'b', 'c', 'b']);
  });

  it('beyond the cap, a client in use is closed when its message ends, not under it', async () => {
    const { pool, message } = clients(1);
    const running = await pool.lease(sessionOf('a'), signal);
    await message('b');
    expect(running.tools.closed).to.equal(0);
    await running.release(true);
    expect(running.tools.closed).to.equal(1);
    expect(pool.size).to.equal(1);
  });

  it('drops a client the gateway failed under; the next message connects again', async () => {
    const { opened, message } = clients();
    const failed = await message('a', false);
    expect(failed.closed).to.equal(1);
    expect(await message('a')).to.not.equal(failed);
    expect(opened).to.have.length(2);
  });

  it('closes the client of a session that ended, at once or when its running message ends', async () => {
    const { pool, message } = clients();
    const idle = await message('a');
    await pool.end('a');
    expect(idle.closed).to.equal(1);
    const running = await pool.lease(sessionOf('b'), signal);
    await pool.end('b');
    expect(running.tools.closed).to.equal(0);
    await running.release(true);
    expect(running.tools.closed).to.equal(1);
    expect(pool.size).to.equal(0);
    await pool.end('never-opened');
  });

  it('keeps nothing when opening fails, and closes every client at shutdown', async () => {
    const clock = new ManualClock();
    let fail = true;
    const pool = new ToolClients<Client>({
      open: async (session) => {
        if (fail) throw new Error('the gateway is down');
        return new Client(session.id);
      },
      idleMs: IDLE_MS,
      maxClients: 10,
      clock,
    });
    let refused: unknown;
    await pool.lease(sessionOf('a'), signal).catch((err: unknown) => (refused = err));
    expect((refused as Error).message).to.equal('the gateway is down');
    expect(pool.size).to.equal(0);
    fail = false;
    const a = await pool.lease(sessionOf('a'), signal);
    const b = await pool.lease(sessionOf('b'), signal);
    await pool.close();
    expect([a.tools.closed, b.tools.closed]).to.deep.equal([1, 1]);
    expect(pool.size).to.equal(0);
  });
});
