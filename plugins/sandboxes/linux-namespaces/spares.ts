import { statSync } from 'node:fs';
import type { PluginLogger } from '@sigil/plugin-api';
import type { PreparedSandbox, SandboxPlan } from './start-sandbox.ts';

export interface SpareOptions {
  /** At most this many spares wait at once; a new one displaces the oldest. 0: none are made. */
  count: number;
  /** A spare unused for this long is discarded. */
  keepMs: number;
  prepare(plan: SandboxPlan): Promise<PreparedSandbox>;
  /** Whether a spare may take what it holds (a host uid) now: sandboxes that run come first. */
  hasRoom(): boolean;
  logger: PluginLogger;
}

interface Spare {
  sandbox: PreparedSandbox;
  /** The install root's identity when the spare was built: a root replaced since makes it stale. */
  root: string;
  timer: NodeJS.Timeout;
}

/**
 * Sandboxes built ahead of need, as serverless platforms keep warm sandboxes: when a sandbox ends,
 * one of the same plan (everything but the server's environment) is built and left waiting at its
 * init, which reads the environment before it runs anything of the server. The next spawn of that
 * plan takes it, hands it the environment, and skips the whole setup (the launch chain's execs,
 * mounts, cgroup and uid). A spare holds no secret: the environment reaches it only when taken.
 */
export class SpareSandboxes {
  /** Insertion order is age: the first is displaced when a new one needs the room. */
  private readonly spares = new Map<string, Spare>();
  private readonly preparing = new Map<string, Promise<void>>();
  /** Spares being discarded, until they have ended: close() waits for them. */
  private readonly discarding = new Set<Promise<void>>();
  private closed = false;

  constructor(private readonly options: SpareOptions) {}

  get size(): number {
    return this.spares.size;
  }

  /**
   * The spare of `plan`, if one waits (or is being built: it is nearly there), still runs, and was
   * built on the root that is there now.
   */
  async take(plan: SandboxPlan): Promise<PreparedSandbox | undefined> {
    const key = planKey(plan);
    await this.preparing.get(key);
    const spare = this.spares.get(key);
    if (!spare) return undefined;
    if (spare.sandbox.process.alive && spare.root === rootIdentity(plan.root)) {
      this.remove(key, spare);
      return spare.sandbox;
    }
    void this.retire(key, spare);
    return undefined;
  }

  /** A sandbox of `plan` ended: one like it is built for the next spawn, unless one waits or is being built. */
  replenish(plan: SandboxPlan): void {
    const key = planKey(plan);
    const root = rootIdentity(plan.root);
    if (this.closed || this.options.count === 0 || root === undefined || !this.options.hasRoom()) return;
    if (this.spares.has(key) || this.preparing.has(key)) return;
    const built = this.options
      .prepare(plan)
      .then(async (sandbox) => {
        if (await sandbox.ready) return this.keep(key, { sandbox, root });
        const { code, reason } = await sandbox.process.exited;
        this.options.logger.warn({ code, reason }, 'a spare sandbox ended before it was set up');
      })
      .catch((err: unknown) => this.options.logger.warn({ err }, 'a spare sandbox could not be built'))
      .finally(() => this.preparing.delete(key));
    this.preparing.set(key, built);
  }

  /** Resolves once no spare is being built. */
  async settled(): Promise<void> {
    while (this.preparing.size > 0) await Promise.all(this.preparing.values());
  }

  /** Discards every spare, and any built later; resolves when every spare has ended. */
  async close(): Promise<void> {
    this.closed = true;
    await this.clear();
    await Promise.all(this.discarding);
  }

  /**
   * Discards every spare, those being built once built (what they hold is wanted); resolves, once
   * they have ended, with how many there were.
   */
  async clear(): Promise<number> {
    await this.settled();
    const all = [...this.spares];
    await Promise.all(all.map(([key, spare]) => this.retire(key, spare)));
    return all.length;
  }

  private keep(key: string, { sandbox, root }: Omit<Spare, 'timer'>): void {
    if (this.closed) {
      void this.discard(sandbox);
      return;
    }
    // Cleared by remove(): it fires only while the spare waits.
    const timer = setTimeout(() => void this.retire(key, spare), this.options.keepMs);
    timer.unref();
    const spare: Spare = { sandbox, root, timer };
    this.spares.set(key, spare);
    // One that ends by itself (its setup failed, say) leaves at once.
    void sandbox.process.exited.then(() => {
      if (this.spares.get(key) === spare) this.remove(key, spare);
    });
    for (const [oldKey, old] of this.spares) {
      if (this.spares.size <= this.options.count) break;
      void this.retire(oldKey, old);
    }
  }

  /** Takes the spare out of the waiting ones and discards it. */
  private retire(key: string, spare: Spare): Promise<void> {
    this.remove(key, spare);
    return this.discard(spare.sandbox);
  }

  private async discard({ process }: PreparedSandbox): Promise<void> {
    process.terminate({ reason: 'a spare sandbox, discarded' });
    const ended = process.exited.then(() => undefined);
    this.discarding.add(ended);
    await ended;
    this.discarding.delete(ended);
  }

  private remove(key: string, spare: Spare): void {
    clearTimeout(spare.timer);
    if (this.spares.get(key) === spare) this.spares.delete(key);
  }
}

/** Plans built by checkSpec list their fields in one order, so equal plans give equal keys. */
const planKey = (plan: SandboxPlan): string => JSON.stringify(plan);

/** The install root's device and inode: a root removed and made again at the same path differs. */
function rootIdentity(path: string): string | undefined {
  try {
    const { dev, ino } = statSync(path);
    return `${dev}:${ino}`;
  } catch {
    return undefined;
  }
}
