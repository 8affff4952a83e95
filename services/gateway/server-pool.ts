import type { CallToolOptions, ToolCallOutcome } from '../../core/mcp/call-tool.ts';
import type { McpProtocol } from '../../core/mcp/era.ts';
import type { Logger } from '../../core/log.ts';
import type { Redactor } from '@sigil/plugin-api';
import { RetryLater } from './retry-later.ts';

/** A started MCP server process with a connected client. */
export interface RunningServer {
  /** The protocol the process speaks (core/mcp/era.ts). */
  protocol: McpProtocol;
  /**
   * tools/call on this process: the hot path, without the SDK's Protocol (see core/mcp/call-tool.ts);
   * a modern server may answer that it needs input first.
   */
  callTool(name: string, args: Record<string, unknown>, options: CallToolOptions): Promise<ToolCallOutcome>;
  /**
   * The wallet's secrets this process was started with: names for proofs, their redaction, and the
   * version of the wallet's stored secrets they were read at (none: it read none).
   */
  injected: { names: readonly string[]; redactor: Redactor; version?: number };
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

/** `Key`: what a process is started from; a `ServerKey` and whatever else `launch` needs. */
export interface ServerPoolOptions<Key extends ServerKey = ServerKey> {
  /** Starts a server's process; called once per key however many calls arrive together. */
  launch(key: Key): Promise<RunningServer>;
  /** A warm process with no call for this long is stopped. */
  idleMs: number;
  /** At most this many processes run; starting one more stops the least recently used idle one. */
  maxRunning: number;
  /** Calls that may wait for a process while all `maxRunning` are busy; more are refused (503). */
  queueLength: number;
  /** How long a call waits for a process before it is refused (503). */
  queueWaitMs: number;
  /**
   * Whether a warm process must not serve another call: what it was started with has changed since
   * (its wallet's secrets, perhaps through another replica). It is stopped, and the call gets a new one.
   */
  outdated?(key: Key, server: RunningServer): Promise<boolean>;
  logger: Logger;
}

interface Slot<Key extends ServerKey> {
  /** The key's id; one-shot slots have one of their own. */
  id: string;
  key: Key;
  server: Promise<RunningServer>;
  /** The process, once started. */
  running: RunningServer | undefined;
  busy: number;
  idleTimer: NodeJS.Timeout | undefined;
  /** A process for one call only: stopped when that call ends. */
  oneShot: boolean;
}

const slotId = (key: ServerKey) => `${key.serverId}\u0000${key.wallet.toLowerCase()}`;

/** A call waiting for a process: woken when one may be free, refused when its time is up. */
class Waiter {
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly queue: Waiter[],
    /** The slot it waits to start or join (none for a one-shot call). */
    readonly slotId: string | undefined,
    waitMs: number,
    private readonly resolve: () => void,
    private readonly reject: (error: Error) => void,
    private readonly refusal: () => Error,
  ) {
    this.timer = setTimeout(() => this.expire(), waitMs);
  }

  wake(): void {
    clearTimeout(this.timer);
    this.resolve();
  }

  private expire(): void {
    const at = this.queue.indexOf(this);
    if (at !== -1) this.queue.splice(at, 1);
    this.reject(this.refusal());
  }
}

/**
 * Warm MCP server processes: started on demand, shared by the calls of one key, stopped when idle,
 * restarted after a crash, capped in number with least-recently-used eviction. A call that needs a new
 * process while every one is busy waits in a bounded queue (length and time), first come first served.
 */
export class ServerPool<Key extends ServerKey = ServerKey> {
  /** Insertion order is recency: a slot is moved to the end whenever it is used. */
  private readonly slots = new Map<string, Slot<Key>>();
  private readonly waiting: Waiter[] = [];
  private oneShots = 0;

  constructor(private readonly options: ServerPoolOptions<Key>) {}

  /**
   * Runs `work` against the key's warm server, starting it first if needed; with `oneShot`, against a
   * fresh process of its own, stopped when `work` ends (nothing it keeps reaches another call).
   */
  async use<T>(key: Key, work: (server: RunningServer) => Promise<T>, oneShot = false): Promise<T> {
    for (;;) {
      const slot = this.acquire(key, oneShot, false) ?? (await this.queue(key, oneShot));
      try {
        const server = await slot.server;
        if (!oneShot && (await this.options.outdated?.(key, server))) {
          // Calls that joined it meanwhile find it outdated too; only the first stops it.
          if (this.slots.get(slot.id) === slot) void this.stop(slot, 'outdated');
          continue;
        }
        return await work(server);
      } finally {
        slot.busy -= 1;
        if (oneShot) void this.stop(slot, 'its one call ended');
        else if (this.slots.get(slot.id) === slot) this.released(slot);
      }
    }
  }

  /**
   * Stops the key's process (a timed-out or misbehaving server; with `server`, only if that is still the
   * key's process): its slot is free at once, for the next call; resolves when the process has ended.
   */
  discard(key: ServerKey, server?: RunningServer): Promise<void> {
    const slot = this.slots.get(slotId(key));
    if (!slot || (server && slot.running !== server)) return Promise.resolve();
    return this.stop(slot, 'discarded');
  }

  running(): Key[] {
    return [...this.slots.values()].map((slot) => slot.key);
  }

  async stopAll(): Promise<void> {
    await Promise.all([...this.slots.values()].map((slot) => this.stop(slot, 'shutdown')));
  }

  /**
   * The key's slot, counted busy; undefined when a new process is needed and there is no room for it,
   * or (unless `queued`, the head of the queue) when earlier calls already wait for room.
   */
  private acquire(key: Key, oneShot: boolean, queued: boolean): Slot<Key> | undefined {
    let id = slotId(key);
    let slot = oneShot ? undefined : this.slots.get(id);
    if (slot) {
      this.slots.delete(id);
    } else {
      if ((!queued && this.waiting.length > 0) || !this.makeRoom()) return undefined;
      if (oneShot) id = `${id}\u0000${(this.oneShots += 1)}`;
      slot = {
        id,
        key,
        server: this.start(key, id),
        running: undefined,
        busy: 0,
        idleTimer: undefined,
        oneShot,
      };
    }
    this.slots.set(id, slot);
    slot.busy += 1;
    clearTimeout(slot.idleTimer);
    return slot;
  }

  /** Waits for room, first come first served, or refuses: the queue is full, or the wait too long. */
  private async queue(key: Key, oneShot: boolean): Promise<Slot<Key>> {
    const { queueLength, queueWaitMs, maxRunning } = this.options;
    const refusal = () =>
      new RetryLater(
        'unavailable',
        `All ${maxRunning} MCP server processes are busy`,
        Math.max(1, Math.ceil(queueWaitMs / 1000)),
        'Retry after the time given, or ask the operator to raise gateway.maxRunningServers',
      );
    if (this.waiting.length >= queueLength) throw refusal();
    const deadline = performance.now() + queueWaitMs;
    const id = oneShot ? undefined : slotId(key);
    for (let first = true; ; first = false) {
      const waitMs = deadline - performance.now();
      if (waitMs <= 0) {
        this.passOn();
        throw refusal();
      }
      await new Promise<void>((resolve, reject) => {
        const waiter = new Waiter(this.waiting, id, waitMs, resolve, reject, refusal);
        // Woken but beaten to the room: back to the head, not the tail.
        if (first) this.waiting.push(waiter);
        else this.waiting.unshift(waiter);
      });
      const slot = this.acquire(key, oneShot, true);
      if (slot) {
        this.wakeJoiners(id);
        // It may have joined its key's process, leaving the room it was woken for to the next.
        this.passOn();
        return slot;
      }
    }
  }

  /** A process may be free (idle, or gone): the first waiting call tries for it. */
  private wakeOne(): void {
    this.waiting.shift()?.wake();
  }

  /** Wakes the calls that wait for the same key's process: now there is one to join. */
  private wakeJoiners(id: string | undefined): void {
    if (id === undefined) return;
    for (let at = this.waiting.length - 1; at >= 0; at -= 1) {
      const waiter = this.waiting[at] as Waiter;
      if (waiter.slotId !== id) continue;
      this.waiting.splice(at, 1);
      waiter.wake();
    }
  }

  /** Wakes the next waiting call if there is room that no call has taken. */
  private passOn(): void {
    if (this.waiting.length > 0 && (this.slots.size < this.options.maxRunning || this.idleSlot()))
      this.wakeOne();
  }

  private start(key: Key, id: string): Promise<RunningServer> {
    const started = this.options.launch(key);
    started.then(
      (server) => {
        const slot = this.slots.get(id);
        if (slot && slot.server === started) slot.running = server;
        // A crashed server leaves the pool at once, so the next call starts a new one.
        void server.exited.then(() => {
          const slot = this.slots.get(id);
          if (slot && slot.server === started) {
            this.remove(slot);
            this.options.logger.info({ serverId: key.serverId }, 'MCP server process ended');
          }
        });
      },
      () => {
        const slot = this.slots.get(id);
        if (slot && slot.server === started) this.remove(slot);
      },
    );
    return started;
  }

  /** True when one more process may start: under the cap, or the least recently used idle one stopped. */
  private makeRoom(): boolean {
    if (this.slots.size < this.options.maxRunning) return true;
    const idle = this.idleSlot();
    if (!idle) return false;
    this.slots.delete(idle.id); // the room is this call's: no waiting call is woken for it
    void this.stop(idle, 'evicted (least recently used)');
    return true;
  }

  /** The least recently used process with no call. */
  private idleSlot(): Slot<Key> | undefined {
    for (const slot of this.slots.values()) if (slot.busy === 0) return slot;
    return undefined;
  }

  /** Its last call ended: idle from now on, and free for a call waiting for room. */
  private released(slot: Slot<Key>): void {
    if (slot.busy > 0) return;
    clearTimeout(slot.idleTimer);
    slot.idleTimer = setTimeout(() => void this.stop(slot, 'idle'), this.options.idleMs);
    slot.idleTimer.unref();
    this.wakeOne();
  }

  private remove(slot: Slot<Key>): void {
    clearTimeout(slot.idleTimer);
    if (this.slots.get(slot.id) !== slot) return;
    this.slots.delete(slot.id);
    this.wakeOne();
  }

  /** Frees the slot at once; the process ends in the background, and the promise settles then. */
  private async stop(slot: Slot<Key>, reason: string): Promise<void> {
    this.remove(slot);
    try {
      const server = await slot.server;
      this.options.logger.info({ serverId: slot.key.serverId, reason }, 'stopping MCP server process');
      await server.kill();
    } catch {
      // A server that never started has nothing to stop.
    }
  }
}
