import { randomBytes } from 'node:crypto';
import type { Hex } from 'viem';
import { TtlCache } from '@sigil/plugin-api/cache';
import type { AuthPrincipal } from '../../../core/auth/index.ts';
import { signatureMatches } from '../../../core/auth/eoa.ts';
import type { Clock } from '../../../core/clock.ts';
import { hkdfSha256, openAesGcm, sealAesGcm } from '../../../core/crypto.ts';
import { isSigilError, SigilError } from '@sigil/plugin-api';
import type { Logger, SecretRegistry } from '../../../core/log.ts';
import {
  lockedHint,
  ProviderKeyUnavailable,
  vaultError,
  vaultUnavailable,
  type UnlockedOn,
} from './errors.ts';
import { PROVIDER_VAULT_MESSAGE, rootCheck, vaultRoot } from './message.ts';
import { VaultSessions, type UnlockedVault } from './sessions.ts';
import type { Protection, SealedEntry, VaultStore } from './store.ts';
import type { VaultUnlocks } from './unlocks.ts';

/**
 * How long a replica trusts its last check of a session it holds unlocked: that no lock through any
 * replica ended the unlock, and which version of the wallet's vault its decrypted keys come from. The
 * replica that locks, stores or deletes acts at once; the others within this bound.
 */
export const VAULT_CHECK_TTL_MS = 2000;

/** What a replica last read of a session it holds unlocked. */
interface Standing {
  /** The version of the wallet's vault. */
  version: number;
  /** Whether this replica's unlock of the session still stands. */
  held: boolean;
}

/** A runtime session as the vault sees it: the wallet, and the session JWT's id and expiry. */
export type VaultSession = Pick<AuthPrincipal, 'address' | 'session'>;

export interface SlotStatus {
  slot: string;
  configured: boolean;
  /** Whether this session can use the key now: stored under the wallet's key, the vault unlocked here. */
  unlocked: boolean;
  protection?: Protection;
  updatedAt?: string;
  /** The loaded llm-provider plugins that take their key from this slot. */
  providers: string[];
}

/** Configuration state only: which slots hold a key, and whether this session has unlocked them. */
export interface VaultStatus {
  /** Always `persistent`: the vault is kept in the database. */
  persistence: 'persistent';
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
  unlocks: VaultUnlocks;
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
  /** The vault is kept in the database: stored keys survive restarts, and every replica sees them. */
  readonly persistence = 'persistent';
  private readonly sessions: VaultSessions;
  private readonly standing = new TtlCache<string, Standing>({
    ttlMs: VAULT_CHECK_TTL_MS,
    maxEntries: 10_000,
  });
  private readonly unlockListeners: ((session: VaultSession) => void)[] = [];

  constructor(private readonly options: ProviderVaultOptions) {
    this.sessions = new VaultSessions(options.clock, options.registry);
  }

  /** Start-up: the server key is known (and agrees with the database's), old files are imported. */
  ready(): Promise<void> {
    return this.options.store.ready();
  }

  /** A graceful stop: decrypted keys leave memory, and this replica's unlocks end. */
  async close(): Promise<void> {
    this.sessions.close();
    await this.options.unlocks.close();
  }

  /**
   * The wallet's key for `slot`, for the call about to be made in this session. Throws
   * {@link ProviderKeyUnavailable}: `provider_key_missing` when none is stored (the hint says how to
   * store one and names the slot), `vault_locked` when one is stored but this replica holds no unlock
   * of the session (ended, or never made here: `details.unlockedOn` says whether another replica holds
   * one).
   */
  async providerKey(session: VaultSession, slot: string): Promise<string> {
    return this.keyFrom(session.address, await this.unlockedFor(session), slot, session.session?.id);
  }

  /**
   * The wallet's key for `slot` for work no request is waiting on (a scheduled self-improvement run),
   * from any of the wallet's sessions that has the vault unlocked now, on this replica. Throws as
   * {@link providerKey} does.
   */
  async providerKeyOfWallet(address: string, slot: string): Promise<string> {
    let unlocked: UnlockedVault | undefined;
    for (const candidate of this.sessions.unlockedOf(address.toLowerCase())) {
      unlocked = await this.checked(candidate);
      if (unlocked !== undefined) break;
    }
    return this.keyFrom(address, unlocked, slot, undefined);
  }

  private async keyFrom(
    address: string,
    unlocked: UnlockedVault | undefined,
    slot: string,
    sessionId: string | undefined,
  ): Promise<string> {
    const cached = unlocked?.keys.get(slot);
    if (cached !== undefined) return cached;
    const lookup = await this.lookup(address);
    const { record, version } = await this.options.store.read(lookup);
    const entry = record?.entries[slot];
    if (entry === undefined) throw new ProviderKeyUnavailable('provider_key_missing', slot);
    if (unlocked === undefined || entry.protection !== 'wallet') {
      throw new ProviderKeyUnavailable('vault_locked', slot, await this.unlockedOn(lookup, sessionId));
    }
    // Stored after this session unlocked (by another session, or through another replica): this
    // session's root opens it. Keys decrypted from an older version go first.
    if (version > unlocked.version) this.sessions.refresh(unlocked, version);
    const key = this.open(lookup, slot, entry, unlocked.root);
    this.sessions.put(unlocked, slot, key);
    return key;
  }

  async status(session: VaultSession): Promise<VaultStatus> {
    const unlocked = await this.unlockedFor(session);
    const { record } = await this.options.store.read(await this.lookup(session.address));
    const known = this.options.knownSlots();
    const names = new Set([...known.keys(), ...Object.keys(record?.entries ?? {})]);
    const slots = [...names].sort().map((slot): SlotStatus => {
      const entry = record?.entries[slot];
      return {
        slot,
        configured: entry !== undefined,
        unlocked: unlocked !== undefined && entry?.protection === 'wallet',
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
   * Unlocks every stored key into this session's memory on this replica with the provider-vault
   * signature, which must be the session wallet's; server-protected copies are sealed again under the
   * wallet's key and the server copy is gone. The unlock is recorded (`vault_unlocks`), without a key.
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
    const root = await vaultRoot(signature);
    const check = rootCheck(root);
    const lookup = await this.lookup(session.address);
    const { record, version } = await this.options.store.read(lookup);
    if (record?.check !== undefined && record.check !== check) throw rootMismatch();
    const result: UnlockResult = {
      unlocked: [],
      migrated: [],
      unreadable: [],
      unlockedUntil: expiresAt.toISOString(),
    };
    const keys = new Map<string, string>();
    const entries = Object.entries(record?.entries ?? {}).sort(([a], [b]) => a.localeCompare(b));
    for (const [slot, entry] of entries) {
      const key = await this.openEither(lookup, slot, entry, root);
      if (key === undefined) {
        result.unreadable.push(slot);
        continue;
      }
      keys.set(slot, key);
      result.unlocked.push(slot);
    }
    const fromServer = entries.filter(([slot, entry]) => entry.protection === 'server' && keys.has(slot));
    let current = version;
    if (fromServer.length > 0) {
      result.migrated = await this.migrate(lookup, root, fromServer, keys);
      current = await this.options.store.version(lookup);
    }
    await this.options.unlocks.record(id, lookup, expiresAt.getTime());
    // The keys are those of `version`; a greater current version (the migration, a change meanwhile)
    // has them decrypted again at their next use.
    this.sessions.open(id, {
      session: id,
      wallet: session.address.toLowerCase(),
      lookup,
      expiresAt: expiresAt.getTime(),
      root,
      keys,
      version,
    });
    this.standing.set(id, { version: current, held: true });
    for (const listener of this.unlockListeners) listener(session);
    return result;
  }

  /**
   * Seals the server-protected copies this unlock opened under the wallet's key, each unless another
   * change replaced it meanwhile; the slots moved.
   */
  private async migrate(
    lookup: string,
    root: Buffer,
    opened: [string, SealedEntry][],
    keys: ReadonlyMap<string, string>,
  ): Promise<string[]> {
    let moved: string[] = [];
    await this.options.store.change(lookup, (current) => {
      if (current === undefined) return undefined;
      const entries = { ...current.entries };
      moved = opened
        .filter(([slot, entry]) => entries[slot]?.ciphertext === entry.ciphertext)
        .map(([slot]) => slot);
      if (moved.length === 0) return undefined;
      for (const slot of moved) entries[slot] = this.seal(lookup, slot, keys.get(slot) as string, root);
      return { version: 1, check: rootCheck(root), entries };
    });
    if (moved.length > 0)
      this.options.logger.info({ slots: moved }, 'provider keys moved under the wallet key');
    return moved;
  }

  /**
   * Stores the wallet's key for `slot`, sealed under its wallet key: the session must have unlocked
   * the vault on this replica, or send the provider-vault signature along (which unlocks it too).
   * True when the slot was empty.
   */
  async store(session: VaultSession, slot: string, apiKey: string, signature?: Hex): Promise<boolean> {
    if (signature !== undefined) await this.unlock(session, signature);
    const unlocked = await this.unlockedFor(session);
    if (unlocked === undefined) {
      const lookup = await this.lookup(session.address);
      const unlockedOn = await this.unlockedOn(lookup, session.session?.id);
      throw vaultError(
        'conflict',
        'vault_locked',
        unlockedOn === 'another_replica'
          ? 'Your provider vault is unlocked on another runtime replica but not on this one: unlock it here before storing a key'
          : 'Unlock your provider vault in this session before storing a key',
        lockedHint(unlockedOn, 'or send that signature along: { "apiKey": "…", "signature": "0x…" }'),
        { unlockedOn },
      );
    }
    const check = rootCheck(unlocked.root);
    let created = false;
    const version = (await this.options.store.change(unlocked.lookup, (current) => {
      if (current?.check !== undefined && current.check !== check) throw rootMismatch();
      created = current?.entries[slot] === undefined;
      return {
        version: 1,
        check,
        entries: { ...current?.entries, [slot]: this.seal(unlocked.lookup, slot, apiKey, unlocked.root) },
      };
    })) as number;
    this.sessions.forget(unlocked.wallet, slot);
    // Its other keys are still those of the vault's version unless another change came in between.
    if (unlocked.version === version - 1) unlocked.version = version;
    this.sessions.put(unlocked, slot, apiKey);
    this.standing.set(unlocked.session, { version, held: true });
    return created;
  }

  /** Deletes the wallet's key for `slot` (no unlock needed); false when there was none. */
  async remove(session: VaultSession, slot: string): Promise<boolean> {
    const lookup = await this.lookup(session.address);
    const version = await this.options.store.change(lookup, (current) => {
      if (current?.entries[slot] === undefined) return undefined;
      const entries = Object.fromEntries(Object.entries(current.entries).filter(([name]) => name !== slot));
      return Object.keys(entries).length === 0 ? null : { ...current, entries };
    });
    if (version === undefined) return false;
    this.sessions.forget(session.address.toLowerCase(), slot);
    return true;
  }

  /**
   * Ends this session's unlock on every replica: here at once, on the others within
   * {@link VAULT_CHECK_TTL_MS}. True when this replica held it.
   */
  async lock(session: VaultSession): Promise<boolean> {
    const { id } = this.sessionOf(session);
    await this.options.unlocks.end(id);
    this.standing.delete(id);
    return this.sessions.end(id);
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
    const entry: SealedEntry = {
      protection: 'server',
      salt: salt.toString('base64'),
      updatedAt: this.options.clock.now().getTime(),
      ...sealAesGcm(key, apiKey, aad(lookup, slot, 'server')),
    };
    await this.options.store.change(lookup, (current) => ({
      version: 1,
      ...current,
      entries: { ...current?.entries, [slot]: entry },
    }));
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

  /** Decrypts an entry of either protection; one that fails authentication is logged and undefined. */
  private async openEither(
    lookup: string,
    slot: string,
    entry: SealedEntry,
    root: Buffer,
  ): Promise<string | undefined> {
    try {
      return entry.protection === 'wallet'
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
      return undefined;
    }
  }

  /** The session's unlock, when this replica holds it and it still stands (see {@link checked}). */
  private async unlockedFor(session: VaultSession): Promise<UnlockedVault | undefined> {
    const id = session.session?.id;
    const unlocked = id === undefined ? undefined : this.sessions.get(id);
    // A session belongs to one wallet; the check costs nothing and guards against a mix-up.
    return unlocked?.wallet === session.address.toLowerCase() ? this.checked(unlocked) : undefined;
  }

  /**
   * An unlock this replica holds, as the database last said (at most {@link VAULT_CHECK_TTL_MS} ago):
   * ended when a lock through any replica removed it; its decrypted keys dropped when the vault
   * changed through another replica since they were decrypted.
   */
  private async checked(unlocked: UnlockedVault): Promise<UnlockedVault | undefined> {
    const standing = await this.standing.get(unlocked.session, async () => {
      const [version, held] = await Promise.all([
        this.options.store.version(unlocked.lookup),
        this.options.unlocks.held(unlocked.session),
      ]);
      return { version, held };
    });
    if (!standing.held) {
      this.sessions.end(unlocked.session);
      return undefined;
    }
    if (standing.version > unlocked.version) this.sessions.refresh(unlocked, standing.version);
    return unlocked;
  }

  /** Where the vault this replica does not hold unlocked is, for the refusal's hint. */
  private unlockedOn(lookup: string, sessionId: string | undefined): Promise<UnlockedOn> {
    return this.options.unlocks.elsewhere(lookup, sessionId);
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
}

const rootMismatch = (): SigilError =>
  vaultError(
    'conflict',
    'vault_key_mismatch',
    'This signature does not open the keys stored in your vault: they were stored with a different signature of the same message',
    'Wallets must sign deterministically (RFC 6979), as externally owned accounts do; with one that does not, delete the keys (DELETE /wallet/provider-vault/keys/:slot) and store them again',
  );
