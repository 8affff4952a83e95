import { randomBytes } from 'node:crypto';
import { TtlCache } from '@sigil/plugin-api/cache';
import { SigilError } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import { hkdfSha256, hmacSha256, openAesGcm, sealAesGcm } from '../../../core/crypto.ts';
import type { Database } from '../../../core/db/database.ts';
import type { Logger } from '../../../core/log.ts';
import {
  DatabaseSecretStore,
  LocalSecretStore,
  secretFilesDir,
  type SealedEntry,
  type SecretStore,
} from './stores.ts';

export type VaultMode = 'persistent' | 'memory';

/**
 * How long a process trusts its copy of a wallet's secrets version for one server (a warm server
 * process is checked against it before each call). A change through this process replaces the copy
 * at once; the bound is how late a replica restarts a process whose secrets changed through another.
 */
export const SECRETS_VERSION_TTL_MS = 2000;

/** A wallet's secrets for one server, decrypted, and the version they were read at. */
export interface WalletSecrets {
  values: Record<string, string>;
  version: number;
}

/**
 * Per-wallet, per-server secrets (gateway spec part 2): AES-256-GCM under a key derived by
 * HKDF-SHA256 from the master key, the wallet address plus a salt, and the server id; stored under an
 * HMAC-SHA256 lookup key, so no wallet address is written anywhere. Every change is a locked
 * read-modify-write of its entry (see the stores), and bumps the entry's version.
 */
export class SecretVault {
  readonly mode: VaultMode;
  private readonly versions = new TtlCache<string, number>({
    ttlMs: SECRETS_VERSION_TTL_MS,
    maxEntries: 10_000,
  });

  constructor(
    private readonly master: Buffer,
    private readonly store: SecretStore,
  ) {
    this.mode = store.kind === 'memory' ? 'memory' : 'persistent';
  }

  /** Sets (or replaces) some of the wallet's secrets for the server; returns all names now stored. */
  async put(wallet: string, serverId: string, values: Readonly<Record<string, string>>): Promise<string[]> {
    const lookup = this.lookupKey(wallet, serverId);
    let names: string[] = [];
    const version = await this.store.change(lookup, (current) => {
      const merged = { ...this.open(wallet, serverId, lookup, current), ...values };
      names = Object.keys(merged).sort();
      return this.seal(wallet, serverId, lookup, merged);
    });
    if (version !== undefined) this.versions.set(lookup, version);
    return names;
  }

  async names(wallet: string, serverId: string): Promise<string[]> {
    return Object.keys((await this.get(wallet, serverId)).values).sort();
  }

  /** Decrypts the wallet's secrets for the server (none when there are none), with their version. */
  async get(wallet: string, serverId: string): Promise<WalletSecrets> {
    const lookup = this.lookupKey(wallet, serverId);
    const { entry, version } = await this.store.read(lookup);
    // Not registered for log scrubbing here: a process holds its secrets there while it runs (launcher.ts).
    return { values: this.open(wallet, serverId, lookup, entry), version };
  }

  /**
   * The version of the wallet's secrets for the server, as this process last read it at most
   * `SECRETS_VERSION_TTL_MS` ago (or wrote it): it grows with every change, on any replica.
   */
  version(wallet: string, serverId: string): Promise<number> {
    const lookup = this.lookupKey(wallet, serverId);
    return this.versions.get(lookup, () => this.store.version(lookup));
  }

  /** Removes one secret, or all of them for the server; true when something was removed. */
  async delete(wallet: string, serverId: string, name?: string): Promise<boolean> {
    const lookup = this.lookupKey(wallet, serverId);
    const version = await this.store.change(lookup, (current) => {
      const values = this.open(wallet, serverId, lookup, current);
      if (Object.keys(values).length === 0 || (name !== undefined && !(name in values))) return undefined;
      const rest = name === undefined ? [] : Object.entries(values).filter(([key]) => key !== name);
      return rest.length === 0 ? null : this.seal(wallet, serverId, lookup, Object.fromEntries(rest));
    });
    if (version === undefined) return false;
    this.versions.set(lookup, version);
    return true;
  }

  private open(
    wallet: string,
    serverId: string,
    lookup: string,
    entry: SealedEntry | undefined,
  ): Record<string, string> {
    if (!entry) return {};
    try {
      const key = this.entryKey(wallet, serverId, Buffer.from(entry.salt, 'base64'));
      return JSON.parse(openAesGcm(key, entry, lookup)) as Record<string, string>;
    } catch (cause) {
      // GCM refuses a changed byte anywhere: never serve a tampered or mis-keyed entry.
      throw new SigilError(
        'internal',
        `Stored secrets for "${serverId}" failed authentication and were not used`,
        { cause },
      );
    }
  }

  private seal(
    wallet: string,
    serverId: string,
    lookup: string,
    values: Record<string, string>,
  ): SealedEntry {
    const salt = randomBytes(16);
    return {
      version: 1,
      salt: salt.toString('base64'),
      ...sealAesGcm(this.entryKey(wallet, serverId, salt), JSON.stringify(values), lookup),
    };
  }

  private lookupKey(wallet: string, serverId: string): string {
    return hmacSha256(this.master, `sigil:secret-lookup\0${wallet.toLowerCase()}\0${serverId}`).toString(
      'hex',
    );
  }

  private entryKey(wallet: string, serverId: string, salt: Buffer): Buffer {
    return hkdfSha256(
      this.master,
      Buffer.concat([Buffer.from(wallet.toLowerCase()), salt]),
      `sigil:secrets:${serverId}`,
    );
  }
}

export interface SecretVaultSettings {
  /** GATEWAY_SECRET_KEY; without it a random master key lives in memory and so do the secrets. */
  masterKey: string | undefined;
  /** VAULT_PERSISTENCE_DIR: the file store's ciphertext is under `<dir>/gateway-secrets/`. */
  persistenceDir: string | undefined;
  /** `gateway.secretsStore`. */
  store: 'auto' | 'database';
  /** `database.shared`: whether replicas share the database. */
  shared: boolean;
  db: Database;
  clock: Clock;
  logger: Logger;
}

/** A vault, and what it does once at start-up. */
export interface OpenedVault {
  vault: SecretVault;
  /** Imports the file store's entries into the database when both are configured (idempotent). */
  start(): Promise<void>;
}

/**
 * The vault on the store the settings choose: the database when replicas share it or the operator
 * asks (GATEWAY_SECRET_KEY required: a key drawn per process could not open another replica's
 * secrets); else files under VAULT_PERSISTENCE_DIR with GATEWAY_SECRET_KEY (one machine); else memory.
 */
export function openSecretVault(settings: SecretVaultSettings): OpenedVault {
  const { masterKey, persistenceDir, logger } = settings;
  if (settings.shared || settings.store === 'database') {
    if (masterKey === undefined) {
      const why = settings.shared
        ? 'replicas share the database (database.shared, the default on PostgreSQL), so secrets live in it'
        : 'gateway.secretsStore is database';
      throw new SigilError(
        'config_invalid',
        `gateway.secretKey (GATEWAY_SECRET_KEY) is required when ${why}: a key drawn per process could not open what another process stored`,
        {
          hint: `Set GATEWAY_SECRET_KEY to the same random value (32 characters or more, e.g. openssl rand -base64 32) on every gateway${settings.shared ? '; a single gateway process on this database may set database.shared to false instead' : ''}`,
        },
      );
    }
    const store = new DatabaseSecretStore(settings.db, settings.clock);
    logger.info('secrets are kept in the database (gateway_secrets), sealed under GATEWAY_SECRET_KEY');
    return {
      vault: new SecretVault(Buffer.from(masterKey, 'utf8'), store),
      start: async () => {
        if (persistenceDir !== undefined) await store.importFiles(secretFilesDir(persistenceDir), logger);
      },
    };
  }
  const persistent = masterKey !== undefined && persistenceDir !== undefined;
  if (persistent) {
    logger.info(
      { dir: secretFilesDir(persistenceDir) },
      'secrets persist as files under VAULT_PERSISTENCE_DIR, for this machine only',
    );
  } else {
    logger.warn(
      masterKey === undefined
        ? 'secrets are memory-only: set GATEWAY_SECRET_KEY and VAULT_PERSISTENCE_DIR (or gateway.secretsStore to database) to keep them across restarts'
        : 'secrets are memory-only: set VAULT_PERSISTENCE_DIR (or gateway.secretsStore to database) to keep them across restarts',
    );
  }
  const master = masterKey === undefined ? randomBytes(32) : Buffer.from(masterKey, 'utf8');
  return {
    vault: new SecretVault(
      master,
      new LocalSecretStore(persistent ? secretFilesDir(persistenceDir) : undefined),
    ),
    start: () => Promise.resolve(),
  };
}
