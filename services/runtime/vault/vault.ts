import { randomBytes } from 'node:crypto';
import type { Hex } from 'viem';
import type { AuthPrincipal } from '../../../core/auth/index.ts';
import { signatureMatches } from '../../../core/auth/eoa.ts';
import type { Clock } from '../../../core/clock.ts';
import { hkdfSha256, openAesGcm, sealAesGcm } from '../../../core/crypto.ts';
import { isSigilError, SigilError } from '@sigil/plugin-api';
import type { Logger, SecretRegistry } from '../../../core/log.ts';
import { ProviderKeyUnavailable, UNLOCK_HINT, vaultError, vaultUnavailable } from './errors.ts';
import { PROVIDER_VAULT_MESSAGE, rootCheck, vaultRoot } from './message.ts';
import { VaultSessions, type UnlockedVault } from './sessions.ts';
import type { Persistence, Protection, SealedEntry, VaultStore, WalletRecord } from './store.ts';

/** A runtime session as the vault sees it: the wallet, and the session JWT's id and expiry. */
export type VaultSession = Pick<AuthPrincipal, 'address' | 'session'>;

export interface SlotStatus {
  slot: string;
  configured: boolean;
  /** Whether this session holds the key decrypted (it can be used now). */
  unlocked: boolean;
  protection?: Protection;
  updatedAt?: string;
  /** The loaded llm-provider plugins that take their key from this slot. */
  providers: string[];
}

/** Configuration state only: which slots hold a key, and whether this session has unlocked them. */
export interface VaultStatus {
  persistence: Persistence;
  unlocked: boolean;
  /** When this session's unlock ends (the session JWT's expiry); null while locked. */
  unlockedUntil: string | null;
  slots: SlotStatus[];
}

export interface UnlockResult {
  unlocked: string[];
  /** Slots whose server-protected copy was moved under the wallet's key by this unlock. */
  migrated: string[];
  /** Slots whose ciphertext failed authentication (altered on disk): left untouched, not unlocked. */
  unreadable: string[];
  unlockedUntil: string;
}

export interface ProviderVaultOptions {
  store: VaultStore;
  clock: Clock;
  logger: Logger;
  registry: SecretRegistry;
  /** Key slots of the loaded llm-provider plugins, with the plugins that use each. */
  knownSlots: () => ReadonlyMap<string, readonly string[]>;
}

const aad = (lookup: string, slot: string, protection: Protection): string =>
  `sigil:provider-vault:v1\0${lookup}\0${slot}\0${protection}`;

const walletKey = (root: Buffer, salt: Buffer, slot: string): Buffer =>
  hkdfSha256(root, salt, `sigil:provider-vault:v1:wallet\0${slot}`);

/**
 * The BYOK vault (runtime spec part 2, vault rules): each wallet's provider keys, one per slot,
 * AES-256-GCM under keys derived by HKDF-SHA256 from the wallet's provider-vault signature, found by
 * an HMAC-SHA256 of the wallet address, decrypted only into the memory of the session that unlocked.
 */
export class ProviderVault {
  readonly message = PROVIDER_VAULT_MESSAGE;
  private readonly sessions: VaultSessions;
  private readonly locks = new Map<string, Promise<unknown>>();
  private readonly unlockListeners: ((session: VaultSession) => void)[] = [];

  constructor(private readonly options: ProviderVaultOptions) {
    this.sessions = new VaultSessions(options.clock, options.registry);
  }

  get persistence(): Persistence {
    return this.options.store.persistence;
  }

  /** Start-up: the directory is usable and the server key known, or the runtime does not start. */
  ready(): Promise<void> {
    return this.options.store.ready();
  }

  close(): void {
    this.sessions.close();
  }

  /**
   * The wallet's key for `slot`, for the call about to be made in this session. Throws
   * {@link ProviderKeyUnavailable}: `provider_key_missing` when none is stored (the hint says how to
   * store one and names the slot), `provider_vault_locked` when one is stored but the session has not
   * unlocked the vault (or its unlock has ended).
   */
  providerKey(session: VaultSession, slot: string): Promise<string> {
    return this.keyFrom(session.address, this.unlockedFor(session), slot);
  }

  /**
   * The wallet's key for `slot` for work no request is waiting on (a scheduled self-improvement run),
   * from any of the wallet's sessions that has the vault unlocked now, in this process. Throws as
   * {@link providerKey} does.
   */
  providerKeyOfWallet(address: string, slot: string): Promise<string> {
    return this.keyFrom(address, this.sessions.unlockedOf(address.toLowerCase()), slot);
  }

  private async keyFrom(address: string, unlocked: UnlockedVault | undefined, slot: string): Promise<string> {
    const cached = unlocked?.keys.get(slot);
    if (cached !== undefined) return cached;
    const lookup = await this.lookup(address);
    const entry = this.options.store.read(lookup)?.entries[slot];
    if (entry === undefined) throw new ProviderKeyUnavailable('provider_key_missing', slot);
    if (unlocked === undefined || entry.protection !== 'wallet') {
      throw new ProviderKeyUnavailable('provider_vault_locked', slot);
    }
    // Stored by another session of the wallet after this one unlocked: this session's root opens it.
    const key = this.open(lookup, slot, entry, unlocked.root);
    this.sessions.put(unlocked, slot, key);
    return key;
  }

  async status(session: VaultSession): Promise<VaultStatus> {
    const unlocked = this.unlockedFor(session);
    const record = this.options.store.read(await this.lookup(session.address));
    const known = this.options.knownSlots();
    const names = new Set([...known.keys(), ...Object.keys(record?.entries ?? {})]);
    const slots = [...names].sort().map((slot): SlotStatus => {
      const entry = record?.entries[slot];
      return {
        slot,
        configured: entry !== undefined,
        unlocked: unlocked?.keys.has(slot) === true,
        ...(entry === undefined
          ? {}
          : { protection: entry.protection, updatedAt: new Date(entry.updatedAt).toISOString() }),
        providers: [...(known.get(slot) ?? [])],
      };
    });
    return {
      persistence: this.persistence,
      unlocked: unlocked !== undefined,
      unlockedUntil: unlocked === undefined ? null : new Date(unlocked.expiresAt).toISOString(),
      slots,
    };
  }

  /** Tells `listener` of each session that unlocks (self-improvement runs waiting for its key go on). */
  onUnlock(listener: (session: VaultSession) => void): void {
    this.unlockListeners.push(listener);
  }

  /**
   * Unlocks every stored key into this session's memory with the provider-vault signature, which must
   * be the session wallet's; server-protected copies are sealed again under the wallet's key and the
   * server copy is gone.
   */
  async unlock(session: VaultSession, signature: Hex): Promise<UnlockResult> {
    const { id, expiresAt } = this.sessionOf(session);
    if (!(await signatureMatches(session.address, PROVIDER_VAULT_MESSAGE, signature))) {
      throw vaultError(
        'forbidden',
        'signature_mismatch',
        `The signature was not made by ${session.address} over the provider-vault message`,
        'Sign exactly the message of GET /wallet/provider-vault/message with the wallet you signed in with',
      );
    }
    const root = vaultRoot(signature);
    const lookup = await this.lookup(session.address);
    return this.exclusive(lookup, async () => {
      const record = this.options.store.read(lookup);
      const check = rootCheck(root);
      if (record?.check !== undefined && record.check !== check) throw rootMismatch();
      const keys = new Map<string, string>();
      const result: UnlockResult = {
        unlocked: [],
        migrated: [],
        unreadable: [],
        unlockedUntil: expiresAt.toISOString(),
      };
      const entries: Record<string, SealedEntry> = { ...record?.entries };
      for (const [slot, entry] of Object.entries(entries).sort(([a], [b]) => a.localeCompare(b))) {
        let key: string;
        try {
          key =
            entry.protection === 'wallet'
              ? this.open(lookup, slot, entry, root)
              : openAesGcm(
                  await this.options.store.serverKey(Buffer.from(entry.salt, 'base64'), slot),
                  entry,
                  aad(lookup, slot, 'server'),
                );
        } catch (err) {
          if (isSigilError(err) && err.code !== 'internal') throw err;
          this.options.logger.error(
            { slot, protection: entry.protection },
            'a stored provider key failed authentication',
          );
          result.unreadable.push(slot);
          continue;
        }
        if (entry.protection === 'server') {
          entries[slot] = this.seal(lookup, slot, key, root);
          result.migrated.push(slot);
        }
        keys.set(slot, key);
        result.unlocked.push(slot);
      }
      if (result.migrated.length > 0) {
        this.options.store.write(lookup, { version: 1, check, entries });
        this.options.logger.info({ slots: result.migrated }, 'provider keys moved under the wallet key');
      }
      this.sessions.open(id, {
        wallet: session.address.toLowerCase(),
        lookup,
        expiresAt: expiresAt.getTime(),
        root,
        keys,
      });
      for (const listener of this.unlockListeners) listener(session);
      return result;
    });
  }

  /**
   * Stores the wallet's key for `slot`, sealed under its wallet key: the session must have unlocked
   * the vault, or send the provider-vault signature along (which unlocks it too). True when the slot
   * was empty.
   */
  async store(session: VaultSession, slot: string, apiKey: string, signature?: Hex): Promise<boolean> {
    if (signature !== undefined) await this.unlock(session, signature);
    const unlocked = this.unlockedFor(session);
    if (unlocked === undefined) {
      throw vaultError(
        'conflict',
        'provider_vault_locked',
        'Unlock your provider vault in this session before storing a key',
        `${UNLOCK_HINT}, or send that signature along: { "apiKey": "…", "signature": "0x…" }`,
      );
    }
    return this.exclusive(unlocked.lookup, () => {
      const record: WalletRecord = this.options.store.read(unlocked.lookup) ?? { version: 1, entries: {} };
      const check = rootCheck(unlocked.root);
      if (record.check !== undefined && record.check !== check) throw rootMismatch();
      const created = record.entries[slot] === undefined;
      this.options.store.write(unlocked.lookup, {
        version: 1,
        check,
        entries: { ...record.entries, [slot]: this.seal(unlocked.lookup, slot, apiKey, unlocked.root) },
      });
      this.sessions.forget(unlocked.wallet, slot);
      this.sessions.put(unlocked, slot, apiKey);
      return Promise.resolve(created);
    });
  }

  /** Deletes the wallet's key for `slot` (no unlock needed); false when there was none. */
  async remove(session: VaultSession, slot: string): Promise<boolean> {
    const lookup = await this.lookup(session.address);
    return this.exclusive(lookup, () => {
      const record = this.options.store.read(lookup);
      if (record?.entries[slot] === undefined) return Promise.resolve(false);
      const entries = Object.fromEntries(Object.entries(record.entries).filter(([name]) => name !== slot));
      if (Object.keys(entries).length === 0) this.options.store.remove(lookup);
      else this.options.store.write(lookup, { ...record, entries });
      this.sessions.forget(session.address.toLowerCase(), slot);
      return Promise.resolve(true);
    });
  }

  /** Ends this session's unlock: its decrypted keys leave memory. True when it was unlocked. */
  lock(session: VaultSession): boolean {
    return this.sessions.end(this.sessionOf(session).id);
  }

  /**
   * Writes a server-protected copy, as deployments before wallet-derived keys kept them, for the next
   * unlock to move under the wallet's key. This runtime never stores a new key this way; it exists for
   * imports from such deployments (and tests).
   */
  async importServerProtected(wallet: string, slot: string, apiKey: string): Promise<void> {
    const lookup = await this.lookup(wallet);
    const salt = randomBytes(16);
    const key = await this.options.store.serverKey(salt, slot);
    await this.exclusive(lookup, () => {
      const record = this.options.store.read(lookup) ?? { version: 1 as const, entries: {} };
      const entry: SealedEntry = {
        protection: 'server',
        salt: salt.toString('base64'),
        updatedAt: this.options.clock.now().getTime(),
        ...sealAesGcm(key, apiKey, aad(lookup, slot, 'server')),
      };
      this.options.store.write(lookup, { ...record, entries: { ...record.entries, [slot]: entry } });
      return Promise.resolve();
    });
  }

  private seal(lookup: string, slot: string, apiKey: string, root: Buffer): SealedEntry {
    const salt = randomBytes(16);
    return {
      protection: 'wallet',
      salt: salt.toString('base64'),
      updatedAt: this.options.clock.now().getTime(),
      ...sealAesGcm(walletKey(root, salt, slot), apiKey, aad(lookup, slot, 'wallet')),
    };
  }

  /** Decrypts a wallet-protected entry; an altered one is an `internal` error naming the slot only. */
  private open(lookup: string, slot: string, entry: SealedEntry, root: Buffer): string {
    try {
      return openAesGcm(
        walletKey(root, Buffer.from(entry.salt, 'base64'), slot),
        entry,
        aad(lookup, slot, 'wallet'),
      );
    } catch {
      throw new SigilError('internal', `The stored key for ${slot} failed authentication and was not used`);
    }
  }

  private unlockedFor(session: VaultSession): UnlockedVault | undefined {
    const id = session.session?.id;
    const unlocked = id === undefined ? undefined : this.sessions.get(id);
    // A session belongs to one wallet; the check costs nothing and guards against a mix-up.
    return unlocked?.wallet === session.address.toLowerCase() ? unlocked : undefined;
  }

  private sessionOf(session: VaultSession): { id: string; expiresAt: Date } {
    if (session.session === undefined) {
      throw new SigilError('forbidden', 'The provider vault works per session JWT', {
        hint: 'Sign in with GET /auth/challenge and POST /auth/verify, and send the JWT as a bearer token',
      });
    }
    return session.session;
  }

  private async lookup(wallet: string): Promise<string> {
    try {
      return await this.options.store.lookup(wallet);
    } catch (err) {
      if (isSigilError(err) && err.code === 'unavailable') throw err;
      this.options.logger.error({ err }, 'provider vault storage is not ready');
      throw vaultUnavailable();
    }
  }

  /** One change at a time per wallet in this process: each reads the file the last one wrote. */
  private exclusive<T>(lookup: string, action: () => Promise<T>): Promise<T> {
    const previous = this.locks.get(lookup) ?? Promise.resolve();
    const next = previous.then(action, action);
    const settled = next.catch(() => undefined);
    this.locks.set(lookup, settled);
    void settled.then(() => {
      if (this.locks.get(lookup) === settled) this.locks.delete(lookup);
    });
    return next;
  }
}

const rootMismatch = (): SigilError =>
  vaultError(
    'conflict',
    'vault_key_mismatch',
    'This signature does not open the keys stored in your vault: they were stored with a different signature of the same message',
    'Wallets must sign deterministically (RFC 6979), as externally owned accounts do; with one that does not, delete the keys (DELETE /wallet/provider-vault/keys/:slot) and store them again',
  );
