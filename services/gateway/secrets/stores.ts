import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';
import { SealedRows } from '../../../core/db/sealed-rows.ts';
import type { Logger } from '../../../core/log.ts';
import { readFileIfExists, removeFileDurably, writeFileDurably } from '../../../core/fs/durable.ts';

/** One wallet's secrets for one server, as stored: AES-256-GCM ciphertext and what decrypts it. */
export const sealedEntry = z
  .object({
    /** The format's version (not the entry's: see `Stored.version`). */
    version: z.literal(1),
    /** Random per entry; with the wallet address it salts the HKDF. */
    salt: z.string().min(1),
    iv: z.string().min(1),
    ciphertext: z.string().min(1),
    tag: z.string().min(1),
  })
  .strict();
export type SealedEntry = z.infer<typeof sealedEntry>;

/** A lookup's entry (none when nothing is stored) and its version, which grows with every change. */
export interface Stored {
  entry: SealedEntry | undefined;
  version: number;
}

/**
 * How an entry changes: the entry to store, null to remove it, or undefined to leave it as it is. It is
 * called with the current entry while no other change of that lookup can run, so none is lost.
 */
export type Change = (current: SealedEntry | undefined) => SealedEntry | null | undefined;

/** Where sealed entries live, each under its HMAC lookup key (never a wallet address). */
export interface SecretStore {
  readonly kind: 'database' | 'files' | 'memory';
  read(lookup: string): Promise<Stored>;
  version(lookup: string): Promise<number>;
  /** Applies `change` to the lookup's entry: the new version, or undefined when it changed nothing. */
  change(lookup: string, change: Change): Promise<number | undefined>;
}

/** Where the file store keeps its entries under VAULT_PERSISTENCE_DIR. */
export const secretFilesDir = (persistenceDir: string): string => join(persistenceDir, 'gateway-secrets');

/**
 * One machine's entries: one file per lookup under `dir` (fsynced, renamed into place), or memory
 * without a directory. A change reads, decides and writes with no await between, so the changes of
 * this process never interleave. Versions count the changes since this process started, as old as
 * any server process it started: that is all they are compared with.
 */
export class LocalSecretStore implements SecretStore {
  readonly kind: 'files' | 'memory';
  private readonly memory = new Map<string, SealedEntry>();
  private readonly versions = new Map<string, number>();

  constructor(private readonly dir: string | undefined) {
    this.kind = dir === undefined ? 'memory' : 'files';
    if (dir !== undefined) mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  read(lookup: string): Promise<Stored> {
    return Promise.resolve({ entry: this.entry(lookup), version: this.versions.get(lookup) ?? 0 });
  }

  version(lookup: string): Promise<number> {
    return Promise.resolve(this.versions.get(lookup) ?? 0);
  }

  // Async only for its signature: the body has no await, so no other change runs within it.
  async change(lookup: string, change: Change): Promise<number | undefined> {
    const next = change(this.entry(lookup));
    if (next === undefined) return undefined;
    if (this.dir === undefined) {
      if (next === null) this.memory.delete(lookup);
      else this.memory.set(lookup, next);
    } else if (next === null) {
      removeFileDurably(this.file(lookup));
    } else {
      writeFileDurably(this.file(lookup), JSON.stringify(next));
    }
    const version = (this.versions.get(lookup) ?? 0) + 1;
    this.versions.set(lookup, version);
    return version;
  }

  private entry(lookup: string): SealedEntry | undefined {
    if (this.dir === undefined) return this.memory.get(lookup);
    const text = readFileIfExists(this.file(lookup));
    return text === undefined ? undefined : (JSON.parse(text) as SealedEntry);
  }

  private file(lookup: string): string {
    return join(this.dir as string, `${lookup}.json`);
  }
}

/**
 * The entries every replica shares, in `gateway_secrets` (see {@link SealedRows}: a change holds the
 * row's lock, so two replicas storing two names at once both keep theirs; versions only grow).
 */
export class DatabaseSecretStore implements SecretStore {
  readonly kind = 'database';
  private readonly rows: SealedRows;

  constructor(db: Database, clock: Clock) {
    this.rows = new SealedRows(db, 'gateway_secrets', clock);
  }

  async read(lookup: string): Promise<Stored> {
    const { sealed, version } = await this.rows.read(lookup);
    return { entry: sealed === null ? undefined : (JSON.parse(sealed) as SealedEntry), version };
  }

  version(lookup: string): Promise<number> {
    return this.rows.version(lookup);
  }

  change(lookup: string, change: Change): Promise<number | undefined> {
    return this.rows.change(lookup, (sealed) => {
      const next = change(sealed === null ? undefined : (JSON.parse(sealed) as SealedEntry));
      return next === undefined || next === null ? next : JSON.stringify(next);
    });
  }

  /**
   * Copies the file store's entries under `dir` into the database as they are (ciphertext: nothing is
   * decrypted, so the lookups and keys match only under the same GATEWAY_SECRET_KEY); what the database
   * already has, deleted entries included, is kept (idempotent). The files stay where they are.
   */
  importFiles(dir: string, logger: Logger): Promise<void> {
    return this.rows.importFiles(dir, sealedEntry, { logger, what: 'secrets' });
  }
}
