import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { hkdfSha256, hmacSha256, type SealedBox } from '../../../core/crypto.ts';
import { SigilError, type TeeBackendV2 } from '@sigil/plugin-api';
import { readFileIfExists, removeFileDurably, writeFileDurably } from '../../../core/fs/durable.ts';
import type { Logger } from '../../../core/log.ts';
import { vaultUnavailable } from './errors.ts';

/**
 * Who can decrypt an entry: `wallet`, only a key derived from the wallet's provider-vault signature
 * (every key this runtime stores); `server`, a key the runtime holds (copies older deployments kept,
 * which the next unlock moves under the wallet's key).
 */
export type Protection = 'wallet' | 'server';

/** One provider key as stored: AES-256-GCM ciphertext, and the salt of its HKDF. */
export interface SealedEntry extends SealedBox {
  protection: Protection;
  salt: string;
  updatedAt: number;
}

/** One wallet's file: its entries by slot, and the check of the signature they were sealed under. */
export interface WalletRecord {
  version: 1;
  /** {@link rootCheck} of the vault root; absent until a wallet-protected entry is written. */
  check?: string;
  entries: Record<string, SealedEntry>;
}

export type Persistence = 'persistent' | 'memory';

/** What tells the key a vault directory's lookups were made with, without revealing it. */
interface KeyMarker {
  keyId: string;
  source: string;
}

export interface VaultStoreOptions {
  /** VAULT_PERSISTENCE_DIR; files go to `<dir>/provider-vault/`. Memory only without it. */
  persistenceDir: string | undefined;
  production: boolean;
  tee: TeeBackendV2;
  logger: Logger;
}

/**
 * Where the provider vault's ciphertext lives: one file per wallet, named by an HMAC-SHA256 of the
 * wallet address (no address is written anywhere), written atomically and fsynced; or a map in memory.
 *
 * The server key (the HMAC key of the names, and the key of server-protected entries) comes from the
 * TEE backend (`signingKey("provider-vault")`) when it is sealed or configured; otherwise from a random
 * key kept in `<dir>/provider-vault/server.key`, or in memory without a directory.
 */
export class VaultStore {
  readonly persistence: Persistence;
  private readonly dir: string | undefined;
  private readonly memory = new Map<string, string>();
  private keys: Promise<{ lookup: Buffer; server: Buffer }> | undefined;

  constructor(private readonly options: VaultStoreOptions) {
    if (options.persistenceDir === undefined) {
      if (options.production) {
        throw new SigilError(
          'config_invalid',
          'vault.persistenceDir (VAULT_PERSISTENCE_DIR) is required in production: the provider vault does not run memory-only there',
          { hint: 'Set VAULT_PERSISTENCE_DIR to a directory only the runtime can read' },
        );
      }
      this.persistence = 'memory';
      this.dir = undefined;
      options.logger.warn(
        'provider keys are memory-only: set VAULT_PERSISTENCE_DIR to keep them across restarts',
      );
    } else {
      this.persistence = 'persistent';
      this.dir = join(options.persistenceDir, 'provider-vault');
    }
  }

  /** Prepares the directory and the server key; a failure here stops start-up. */
  async ready(): Promise<void> {
    await this.materials();
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

  private materials(): Promise<{ lookup: Buffer; server: Buffer }> {
    // A failed preparation (a directory not writable yet) is tried again by the next call.
    this.keys ??= this.prepare().catch((err: unknown) => {
      this.keys = undefined;
      throw err;
    });
    return this.keys;
  }

  read(lookup: string): WalletRecord | undefined {
    const text = this.io(() =>
      this.dir === undefined ? this.memory.get(lookup) : readFileIfExists(this.file(lookup)),
    );
    return text === undefined ? undefined : (JSON.parse(text) as WalletRecord);
  }

  write(lookup: string, record: WalletRecord): void {
    const text = JSON.stringify(record);
    this.io(() =>
      this.dir === undefined ? this.memory.set(lookup, text) : writeFileDurably(this.file(lookup), text),
    );
  }

  remove(lookup: string): void {
    this.io(() =>
      this.dir === undefined ? this.memory.delete(lookup) : removeFileDurably(this.file(lookup)),
    );
  }

  private file(lookup: string): string {
    return join(this.dir as string, `${lookup}.json`);
  }

  /** Storage failures are logged for the operator and answered 503: never a silent fallback. */
  private io<T>(action: () => T): T {
    try {
      return action();
    } catch (err) {
      this.options.logger.error({ err }, 'provider vault storage failed');
      throw vaultUnavailable();
    }
  }

  private async prepare(): Promise<{ lookup: Buffer; server: Buffer }> {
    let root: Buffer;
    let source: string;
    const fromTee = await this.options.tee.signingKey('provider-vault');
    if (fromTee.source === 'sealed' || fromTee.source === 'config') {
      root = Buffer.from(fromTee.key);
      source = `tee:${fromTee.source}`;
    } else if (this.dir === undefined) {
      root = randomBytes(32);
      source = 'memory';
    } else {
      root = this.keyFile();
      source = 'file';
    }
    const keys = {
      lookup: hkdfSha256(root, 'sigil:provider-vault', 'sigil:provider-vault:v1:lookup-key'),
      server: hkdfSha256(root, 'sigil:provider-vault', 'sigil:provider-vault:v1:server-key'),
    };
    if (this.dir !== undefined) this.checkMarker(keys.lookup, source);
    return keys;
  }

  /** The random server key of a directory whose TEE backend has no stable key to give. */
  private keyFile(): Buffer {
    const file = join(this.dir as string, 'server.key');
    mkdirSync(this.dir as string, { recursive: true, mode: 0o700 });
    const existing = readFileIfExists(file);
    if (existing !== undefined) return Buffer.from(existing.trim(), 'base64');
    const key = randomBytes(32);
    writeFileDurably(file, key.toString('base64'));
    return key;
  }

  /**
   * Files found under one key cannot be found under another: a directory records which key named its
   * files, and a change (say, a TEE backend now configured) is refused in production and reported
   * otherwise. Writing the marker also proves the directory is writable before anything is served.
   */
  private checkMarker(lookupKey: Buffer, source: string): void {
    const dir = this.dir as string;
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const file = join(dir, 'key-id.json');
    const keyId = hmacSha256(lookupKey, 'sigil:provider-vault:key-id').toString('hex').slice(0, 16);
    const existing = readFileIfExists(file);
    const marker = existing === undefined ? undefined : (JSON.parse(existing) as KeyMarker);
    if (marker !== undefined && marker.keyId !== keyId) {
      const message = `the provider vault in ${dir} was written under another server key (${marker.source}, now ${source}): its keys cannot be found`;
      if (this.options.production) {
        throw new SigilError('config_invalid', message, {
          hint: 'Restore the TEE backend configuration (or server.key) the vault was written with',
        });
      }
      this.options.logger.error(message);
    }
    writeFileDurably(file, JSON.stringify({ keyId, source } satisfies KeyMarker));
  }
}
