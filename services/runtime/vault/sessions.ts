import type { Clock } from '../../../core/clock.ts';
import type { SecretRegistry } from '../../../core/log.ts';

/** One session's unlocked vault: the root its signature gave, and the keys decrypted so far. */
export interface UnlockedVault {
  /** The session JWT's id. */
  session: string;
  /** Lower-cased wallet address. */
  wallet: string;
  lookup: string;
  /** Unix ms: the session JWT's expiry, after which all of this is dropped. */
  expiresAt: number;
  root: Buffer;
  keys: Map<string, string>;
  /** The version of the wallet's vault the keys were decrypted from (a greater one drops them). */
  version: number;
}

const SWEEP_INTERVAL_MS = 60_000;

/**
 * Decrypted provider keys, in this process's memory only, per runtime session (a session JWT's `jti`).
 * They go when the session does: at its expiry (checked at every use, and swept every minute), when it
 * locks the vault, when the process stops. Nothing here is ever written anywhere.
 *
 * Each decrypted key is in the secret registry while some session holds it, so a log line that would
 * quote it is scrubbed.
 */
export class VaultSessions {
  private readonly sessions = new Map<string, UnlockedVault>();
  private readonly holders = new Map<string, number>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    private readonly clock: Clock,
    private readonly registry: SecretRegistry,
  ) {
    this.sweeper = setInterval(() => this.sweep(), SWEEP_INTERVAL_MS);
    this.sweeper.unref();
  }

  /** The session's unlocked vault, unless it never unlocked, locked again or has expired. */
  get(sessionId: string): UnlockedVault | undefined {
    const vault = this.sessions.get(sessionId);
    if (vault === undefined) return undefined;
    if (vault.expiresAt <= this.clock.now().getTime()) {
      this.end(sessionId);
      return undefined;
    }
    return vault;
  }

  /** The wallet's sessions that have its vault unlocked now, the one unlocked longest ahead first. */
  unlockedOf(wallet: string): UnlockedVault[] {
    const found: UnlockedVault[] = [];
    for (const id of [...this.sessions.keys()]) {
      const vault = this.get(id);
      if (vault?.wallet === wallet) found.push(vault);
    }
    return found.sort((a, b) => b.expiresAt - a.expiresAt);
  }

  /** Replaces whatever the session had unlocked. */
  open(sessionId: string, vault: UnlockedVault): void {
    this.end(sessionId);
    this.sessions.set(sessionId, vault);
    for (const key of vault.keys.values()) this.hold(key);
  }

  /** Adds (or replaces) one decrypted key in a session. */
  put(vault: UnlockedVault, slot: string, key: string): void {
    const previous = vault.keys.get(slot);
    if (previous === key) return;
    vault.keys.set(slot, key);
    this.hold(key);
    if (previous !== undefined) this.release(previous);
  }

  /**
   * Drops the session's decrypted keys, which another replica's change of the vault (now at `version`)
   * may have made stale: each is decrypted again from the stored vault when next used.
   */
  refresh(vault: UnlockedVault, version: number): void {
    for (const key of vault.keys.values()) this.release(key);
    vault.keys.clear();
    vault.version = version;
  }

  /** Drops a slot from every session of the wallet (its key was deleted or replaced elsewhere). */
  forget(wallet: string, slot: string): void {
    for (const vault of this.sessions.values()) {
      const key = vault.wallet === wallet ? vault.keys.get(slot) : undefined;
      if (key === undefined) continue;
      vault.keys.delete(slot);
      this.release(key);
    }
  }

  end(sessionId: string): boolean {
    const vault = this.sessions.get(sessionId);
    if (vault === undefined) return false;
    this.sessions.delete(sessionId);
    for (const key of vault.keys.values()) this.release(key);
    vault.keys.clear();
    vault.root.fill(0);
    return true;
  }

  close(): void {
    clearInterval(this.sweeper);
    for (const id of [...this.sessions.keys()]) this.end(id);
  }

  private sweep(): void {
    const now = this.clock.now().getTime();
    for (const [id, vault] of this.sessions) if (vault.expiresAt <= now) this.end(id);
  }

  private hold(key: string): void {
    this.holders.set(key, (this.holders.get(key) ?? 0) + 1);
    this.registry.add(key);
  }

  private release(key: string): void {
    const left = (this.holders.get(key) ?? 1) - 1;
    if (left > 0) {
      this.holders.set(key, left);
      return;
    }
    this.holders.delete(key);
    this.registry.remove(key);
  }
}
