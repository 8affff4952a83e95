import { join } from 'node:path';
import { z } from 'zod';
import type { TeeBackendV2 } from '@sigil/plugin-api';
import type { Clock } from '../../../core/clock.ts';
import { hkdfSha256, hmacSha256 } from '../../../core/crypto.ts';
import type { Database } from '../../../core/db/database.ts';
import type { KeyAtRest } from '../../../core/db/data-key.ts';
import { SealedRows } from '../../../core/db/sealed-rows.ts';
import { readFileIfExists } from '../../../core/fs/durable.ts';
import type { Logger } from '../../../core/log.ts';
import { vaultStorage } from './errors.ts';
import { vaultServerKeys, type ServerKeys } from './server-key.ts';

/**
 * Who can decrypt an entry: `wallet`, only a key derived from the wallet's provider-vault signature
 * (every key this runtime stores); `server`, a key the runtime holds (copies older deployments kept,
 * which the next unlock moves under the wallet's key).
 */
export type Protection = 'wallet' | 'server';

/** One provider key as stored: AES-256-GCM ciphertext, and the salt of its HKDF. */
export const sealedEntry = z
  .object({
    protection: z.enum(['wallet', 'server']),
    salt: z.string().min(1),
    iv: z.string().min(1),
    ciphertext: z.string().min(1),
    tag: z.string().min(1),
    updatedAt: z.number(),
  })
  .strict();
export type SealedEntry = z.infer<typeof sealedEntry>;

/** One wallet's vault: its entries by slot, and the check of the signature they were sealed under. */
export const walletRecord = z
  .object({
    version: z.literal(1),
    /** {@link rootCheck} of the vault root; absent until a wallet-protected entry is written. */
    check: z.string().optional(),
    entries: z.record(z.string(), sealedEntry),
  })
  .strict();
export type WalletRecord = z.infer<typeof walletRecord>;

/** A wallet's vault as read (none when nothing is stored), and the version it was read at. */
export interface StoredVault {
  record: WalletRecord | undefined;
  version: number;
}

/**
 * How a wallet's vault changes: the record to store, null to empty it, undefined to leave it. It runs
 * while no other change of that wallet's vault can, on any replica.
 */
export type VaultChange = (
  current: WalletRecord | undefined,
) => WalletRecord | null | undefined | Promise<WalletRecord | null | undefined>;

/** What a file store recorded of the key that named its files. */
interface KeyMarker {
  keyId: string;
  source: string;
}

export interface VaultStoreOptions {
  db: Database;
  clock: Clock;
  /**
   * VAULT_PERSISTENCE_DIR: where a runtime kept the vault as files before the database
   * (`<dir>/provider-vault/`); they are imported at start-up.
   */
  persistenceDir: string | undefined;
  /** Whether a changed server key stops start-up (production, or replicas sharing the database). */
  strict: boolean;
  /** How a server key drawn here is kept in the database. */
  atRest: KeyAtRest;
  tee: TeeBackendV2;
  logger: Logger;
}

/**
 * Where the provider vault's ciphertext lives: one row per wallet in `provider_vaults`, shared by every
 * replica, under an HMAC-SHA256 of the wallet address (no address is written anywhere); a change holds
 * the row's lock and grows its version (see {@link SealedRows}). The HMAC key and the key of
 * server-protected entries derive from the server key (server-key.ts).
 */
export class VaultStore {
  private readonly rows: SealedRows;
  private keys: Promise<ServerKeys> | undefined;

  constructor(private readonly options: VaultStoreOptions) {
    this.rows = new SealedRows(options.db, 'provider_vaults', options.clock);
  }

  /** Start-up: the server key is known, and files a runtime kept before are imported (once). */
  async ready(): Promise<void> {
    const keys = await this.materials();
    this.options.logger.info(
      { serverKey: keys.source },
      keys.source === 'database'
        ? 'provider vault: kept in the database, its lookups keyed by a server key kept there too (configure the TEE backend’s key, e.g. tee-none keyMaterial, to keep it out)'
        : 'provider vault: kept in the database, its lookups keyed by the TEE backend’s key',
    );
    if (this.options.persistenceDir !== undefined)
      await this.importFiles(join(this.options.persistenceDir, 'provider-vault'), keys.keyId);
  }

  /** The wallet's name in the store. */
  async lookup(wallet: string): Promise<string> {
    const { lookup } = await this.materials();
    return hmacSha256(lookup, `sigil:provider-vault:lookup\0${wallet.toLowerCase()}`).toString('hex');
  }

  /** The key of a server-protected entry. */
  async serverKey(salt: Buffer, slot: string): Promise<Buffer> {
    const { server } = await this.materials();
    return hkdfSha256(server, salt, `sigil:provider-vault:v1:server\0${slot}`);
  }

  read(lookup: string): Promise<StoredVault> {
    return this.storage(async () => {
      const { sealed, version } = await this.rows.read(lookup);
      return { record: sealed === null ? undefined : (JSON.parse(sealed) as WalletRecord), version };
    });
  }

  version(lookup: string): Promise<number> {
    return this.storage(() => this.rows.version(lookup));
  }

  /** Applies `change` to the wallet's vault: its new version, or undefined when nothing changed. */
  change(lookup: string, change: VaultChange): Promise<number | undefined> {
    return this.storage(() =>
      this.rows.change(lookup, async (sealed) => {
        const next = await change(sealed === null ? undefined : (JSON.parse(sealed) as WalletRecord));
        return next === undefined || next === null ? next : JSON.stringify(next);
      }),
    );
  }

  private storage<T>(work: () => Promise<T>): Promise<T> {
    return vaultStorage(this.options.logger, work);
  }

  private materials(): Promise<ServerKeys> {
    // A failed preparation (the database not reachable yet) is tried again by the next call.
    this.keys ??= this.storage(() =>
      vaultServerKeys({
        db: this.options.db,
        clock: this.options.clock,
        tee: this.options.tee,
        logger: this.options.logger,
        filesDir:
          this.options.persistenceDir === undefined
            ? undefined
            : join(this.options.persistenceDir, 'provider-vault'),
        strict: this.options.strict,
        atRest: this.options.atRest,
      }),
    ).catch((err: unknown) => {
      this.keys = undefined;
      throw err;
    });
    return this.keys;
  }

  /**
   * Copies the wallets' files of a file store into the database as they are (ciphertext). A wallet the
   * database already has keeps its row, so a second start imports nothing and never brings back a key
   * deleted or replaced since; the files stay. Files named under another server key than the
   * database's (their `key-id.json` says) could not be found there: they are left, and logged.
   */
  private async importFiles(dir: string, keyId: string): Promise<void> {
    const { logger } = this.options;
    const markerText = readFileIfExists(join(dir, 'key-id.json'));
    const marker = markerText === undefined ? undefined : (JSON.parse(markerText) as KeyMarker);
    if (marker !== undefined && marker.keyId !== keyId) {
      logger.error(
        { dir, filesKey: marker.source },
        'provider vault: the files under VAULT_PERSISTENCE_DIR were named under another server key than the database’s, and were not imported',
      );
      return;
    }
    await this.rows.importFiles(dir, walletRecord, { logger, what: 'provider vault' });
  }
}
