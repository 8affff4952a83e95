import type { Clock } from '../../../core/clock.ts';
import type { ChatSession } from './sessions.ts';
import type { GatewayToolSession } from './tools.ts';

/** What the clients are kept for: anything that can be closed (the gateway's MCP clients in the chat). */
export interface Closable {
  close(): Promise<void>;
}

export interface ToolClientsOptions<Tools extends Closable> {
  /** Connects, enables the session's servers and lists their tools: one MCP client of the gateway. */
  open(session: ChatSession, signal: AbortSignal): Promise<Tools>;
  /** A client unused this long is closed (the next message of its session connects again). */
  idleMs: number;
  /** At most this many clients stay open; the least recently used idle one is closed beyond it. */
  maxClients: number;
  clock: Clock;
}

interface Entry<Tools> {
  tools: Tools;
  lastUsed: number;
  /** A message of the session is using it: never closed under it. */
  leased: boolean;
  /** Closed once the lease ends (evicted or its session ended while leased). */
  retired: boolean;
}

/** A chat request's use of its session's client; `release(false)` when the gateway failed under it. */
export interface ToolLease<Tools extends Closable = GatewayToolSession> {
  tools: Tools;
  release(healthy: boolean): Promise<void>;
}

/**
 * One MCP client of the gateway per chat session, kept between its messages, instead of connecting,
 * enabling and listing on every message. A client ends with its session, when idle for `idleMs`,
 * beyond `maxClients` (least recently used first), after a gateway failure, and at shutdown.
 */
export class ToolClients<Tools extends Closable = GatewayToolSession> {
  /** In order of last use, least recent first. */
  private readonly entries = new Map<string, Entry<Tools>>();

  constructor(private readonly options: ToolClientsOptions<Tools>) {}

  /** The session's client, opened on its first message; one request of a session at a time uses it. */
  async lease(session: ChatSession, signal: AbortSignal): Promise<ToolLease<Tools>> {
    await this.evictIdle();
    let entry = this.entries.get(session.id);
    if (entry === undefined) {
      entry = { tools: await this.options.open(session, signal), lastUsed: 0, leased: false, retired: false };
    }
    this.entries.delete(session.id);
    this.entries.set(session.id, entry);
    entry.leased = true;
    await this.enforceCap();
    const leased = entry;
    return {
      tools: leased.tools,
      release: async (healthy) => {
        leased.leased = false;
        leased.lastUsed = this.now();
        if (healthy && !leased.retired) return;
        if (this.entries.get(session.id) === leased) this.entries.delete(session.id);
        await leased.tools.close();
      },
    };
  }

  /** Closes the client of a session that ended (closed, expired); at its lease's end if in use. */
  async end(sessionId: string): Promise<void> {
    const entry = this.entries.get(sessionId);
    if (entry === undefined) return;
    this.entries.delete(sessionId);
    await this.retire(entry);
  }

  /** How many clients are open. */
  get size(): number {
    return this.entries.size;
  }

  /** Closes every client (the runtime is stopping). */
  async close(): Promise<void> {
    const all = [...this.entries.values()];
    this.entries.clear();
    await Promise.all(all.map((entry) => entry.tools.close()));
  }

  private async evictIdle(): Promise<void> {
    const cutoff = this.now() - this.options.idleMs;
    for (const [id, entry] of this.entries) {
      if (entry.leased || entry.lastUsed > cutoff) continue;
      this.entries.delete(id);
      await entry.tools.close();
    }
  }

  private async enforceCap(): Promise<void> {
    for (const [id, entry] of this.entries) {
      if (this.entries.size <= this.options.maxClients) return;
      this.entries.delete(id);
      await this.retire(entry);
    }
  }

  private async retire(entry: Entry<Tools>): Promise<void> {
    if (entry.leased) entry.retired = true;
    else await entry.tools.close();
  }

  private now(): number {
    return this.options.clock.now().getTime();
  }
}
