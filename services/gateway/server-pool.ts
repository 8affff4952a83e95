import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { CallToolOptions } from '../../core/mcp/call-tool.ts';
import { SigilError } from '../../core/errors.ts';
import type { Logger } from '../../core/log.ts';
import type { Redactor } from '../../core/redaction.ts';

/** A started MCP server process with a connected client. */
export interface RunningServer {
  client: Client;
  /** tools/call on this process: the hot path, without the SDK's Protocol (see core/mcp/call-tool.ts). */
  callTool(name: string, args: Record<string, unknown>, options: CallToolOptions): Promise<CallToolResult>;
  /** The wallet's secrets this process was started with: names for proofs, and their redaction. */
  injected: { names: readonly string[]; redactor: Redactor };
  /** Settles when the process has ended, for whatever reason. */
  exited: Promise<unknown>;
  kill(): Promise<void>;
}

/** Processes are per server and per wallet, so one wallet's secrets never reach another's process. */
export interface ServerKey {
  serverId: string;
  /** The caller's wallet, or `anonymous`. */
  wallet: string;
}

export interface ServerPoolOptions {
  /** Starts a server's process; called once per key however many calls arrive together. */
  launch(key: ServerKey): Promise<RunningServer>;
  /** A warm process with no call for this long is stopped. */
  idleMs: number;
  /** At most this many processes run; starting one more stops the least recently used idle one. */
  maxRunning: number;
  logger: Logger;
}

interface Slot {
  key: ServerKey;
  server: Promise<RunningServer>;
  busy: number;
  idleTimer: NodeJS.Timeout | undefined;
}

const slotId = (key: ServerKey) => `${key.serverId}\u0000${key.wallet.toLowerCase()}`;

/**
 * Warm MCP server processes: started on demand, shared by the calls of one key, stopped when idle,
 * restarted after a crash, capped in number with least-recently-used eviction.
 */
export class ServerPool {
  /** Insertion order is recency: a slot is moved to the end whenever it is used. */
  private readonly slots = new Map<string, Slot>();

  constructor(private readonly options: ServerPoolOptions) {}

  /** Runs `work` against the key's warm server, starting it first if needed. */
  async use<T>(key: ServerKey, work: (server: RunningServer) => Promise<T>): Promise<T> {
    const slot = this.acquire(key);
    try {
      return await work(await slot.server);
    } finally {
      slot.busy -= 1;
      if (this.slots.get(slotId(key)) === slot) this.armIdleTimer(slot);
    }
  }

  /** Kills the key's process (a timed-out or misbehaving server); the next call starts a fresh one. */
  async discard(key: ServerKey): Promise<void> {
    const slot = this.slots.get(slotId(key));
    if (slot) await this.stop(slot, 'discarded');
  }

  running(): ServerKey[] {
    return [...this.slots.values()].map((slot) => slot.key);
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.slots.values()].map((slot) => this.stop(slot, 'shutdown')));
  }

  private acquire(key: ServerKey): Slot {
    const id = slotId(key);
    let slot = this.slots.get(id);
    if (slot) {
      this.slots.delete(id);
    } else {
      this.makeRoom();
      slot = { key, server: this.start(key, id), busy: 0, idleTimer: undefined };
    }
    this.slots.set(id, slot);
    slot.busy += 1;
    clearTimeout(slot.idleTimer);
    return slot;
  }

  private start(key: ServerKey, id: string): Promise<RunningServer> {
    const started = this.options.launch(key);
    started.then(
      (server) => {
        // A crashed server leaves the pool at once, so the next call starts a new one.
        void server.exited.then(() => {
          const slot = this.slots.get(id);
          if (slot && slot.server === started) {
            clearTimeout(slot.idleTimer);
            this.slots.delete(id);
            this.options.logger.info({ serverId: key.serverId }, 'MCP server process ended');
          }
        });
      },
      () => {
        const slot = this.slots.get(id);
        if (slot && slot.server === started) this.slots.delete(id);
      },
    );
    return started;
  }

  private makeRoom(): void {
    if (this.slots.size < this.options.maxRunning) return;
    const idle = [...this.slots.values()].find((slot) => slot.busy === 0);
    if (!idle) {
      throw new SigilError('unavailable', `All ${this.options.maxRunning} MCP server slots are busy`, {
        hint: 'Retry shortly, or raise gateway.maxRunningServers',
      });
    }
    void this.stop(idle, 'evicted (least recently used)');
  }

  private armIdleTimer(slot: Slot): void {
    if (slot.busy > 0) return;
    clearTimeout(slot.idleTimer);
    slot.idleTimer = setTimeout(() => void this.stop(slot, 'idle'), this.options.idleMs);
    slot.idleTimer.unref();
  }

  private async stop(slot: Slot, reason: string): Promise<void> {
    const id = slotId(slot.key);
    if (this.slots.get(id) === slot) this.slots.delete(id);
    clearTimeout(slot.idleTimer);
    try {
      const server = await slot.server;
      this.options.logger.info({ serverId: slot.key.serverId, reason }, 'stopping MCP server process');
      await server.kill();
    } catch {
      // A server that never started has nothing to stop.
    }
  }
}
