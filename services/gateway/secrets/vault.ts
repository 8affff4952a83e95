import { randomBytes } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { hkdfSha256, hmacSha256, openAesGcm, sealAesGcm, type SealedBox } from '../../../core/crypto.ts';
import { readFileIfExists, removeFileDurably, writeFileDurably } from '../../../core/fs/durable.ts';
import { SigilError } from '@sigil/plugin-api';
import type { Logger } from '../../../core/log.ts';

/** One wallet's secrets for one server, as stored: AES-256-GCM ciphertext and what decrypts it. */
interface SealedEntry extends SealedBox {
  version: 1;
  /** Random per entry; with the wallet address it salts the HKDF. */
  salt: string;
}

export type VaultMode = 'persistent' | 'memory';

export interface SecretVaultOptions {
  /** GATEWAY_SECRET_KEY; without it a random master key lives in memory and so do the secrets. */
  masterKey: string | undefined;
  /** VAULT_PERSISTENCE_DIR; ciphertext goes to `<dir>/gateway-secrets/`. */
  persistenceDir: string | undefined;
  logger: Logger;
}

/**
 * Per-wallet, per-server secrets (gateway spec part 2): AES-256-GCM under a key derived by
 * HKDF-SHA256 from the master key, the wallet address plus a salt, and the server id; stored under an
 * HMAC-SHA256 lookup key, so no wallet address is written anywhere.
 */
export class SecretVault {
  readonly mode: VaultMode;
  private readonly master: Buffer;
  private readonly dir: string | undefined;
  private readonly memory = new Map<string, SealedEntry>();

  constructor(private readonly options: SecretVaultOptions) {
    this.master = options.masterKey === undefined ? randomBytes(32) : Buffer.from(options.masterKey, 'utf8');
    if (options.masterKey !== undefined && options.persistenceDir !== undefined) {
      this.mode = 'persistent';
      this.dir = join(options.persistenceDir, 'gateway-secrets');
      mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    } else {
      this.mode = 'memory';
      options.logger.warn(
        options.masterKey === undefined
          ? 'secrets are memory-only: set GATEWAY_SECRET_KEY and VAULT_PERSISTENCE_DIR to keep them across restarts'
          : 'secrets are memory-only: set VAULT_PERSISTENCE_DIR to keep them across restarts',
      );
    }
  }

  /** Sets (or replaces) some of the wallet's secrets for the server; returns all names now stored. */
  async put(wallet: string, serverId: string, values: Readonly<Record<string, string>>): Promise<string[]> {
    const merged = { ...(await this.get(wallet, serverId)), ...values };
    this.write(wallet, serverId, merged);
    return Object.keys(merged).sort();
  }

  async names(wallet: string, serverId: string): Promise<string[]> {
    return Object.keys(await this.get(wallet, serverId)).sort();
  }

  /** Decrypts the wallet's secrets for the server; empty when there are none. */
  async get(wallet: string, serverId: string): Promise<Record<string, string>> {
    const lookup = this.lookupKey(wallet, serverId);
    const entry = this.read(lookup);
    if (!entry) return {};
    let plain: string;
    try {
      plain = openAesGcm(this.entryKey(wallet, serverId, Buffer.from(entry.salt, 'base64')), entry, lookup);
    } catch (cause) {
      // GCM refuses a changed byte anywhere: never serve a tampered or mis-keyed entry.
      throw new SigilError(
        'internal',
        `Stored secrets for "${serverId}" failed authentication and were not used`,
        { cause },
      );
    }
    // Not registered for log scrubbing here: a process holds its secrets there while it runs (launcher.ts).
    return JSON.parse(plain) as Record<string, string>;
  }

  /** Removes one secret, or all of them for the server; true when something was removed. */
  async delete(wallet: string, serverId: string, name?: string): Promise<boolean> {
    const current = await this.get(wallet, serverId);
    if (name !== undefined && !(name in current)) return false;
    if (Object.keys(current).length === 0) return false;
    const rest =
      name === undefined ? {} : Object.fromEntries(Object.entries(current).filter(([key]) => key !== name));
    if (Object.keys(rest).length === 0) this.remove(this.lookupKey(wallet, serverId));
    else this.write(wallet, serverId, rest);
    return true;
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

  private write(wallet: string, serverId: string, values: Record<string, string>): void {
    const salt = randomBytes(16);
    const lookup = this.lookupKey(wallet, serverId);
    const entry: SealedEntry = {
      version: 1,
      salt: salt.toString('base64'),
      ...sealAesGcm(this.entryKey(wallet, serverId, salt), JSON.stringify(values), lookup),
    };
    if (this.dir === undefined) {
      this.memory.set(lookup, entry);
      return;
    }
    writeFileDurably(join(this.dir, `${lookup}.json`), JSON.stringify(entry));
  }

  private read(lookup: string): SealedEntry | undefined {
    if (this.dir === undefined) return this.memory.get(lookup);
    const text = readFileIfExists(join(this.dir, `${lookup}.json`));
    return text === undefined ? undefined : (JSON.parse(text) as SealedEntry);
  }

  private remove(lookup: string): void {
    if (this.dir === undefined) this.memory.delete(lookup);
    else removeFileDurably(join(this.dir, `${lookup}.json`));
  }
}
