import { mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import type { Clock } from '../../../core/clock.ts';
import type { Database } from '../../../core/db/database.ts';
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

const LOOKUP_FILE = /^([0-9a-f]{64})\.json$/;

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

interface SecretRow {
  sealed: string | null;
  version: number | string;
}

/** What an import of the file store found: entries copied, entries the database had, files it could not read. */
export interface ImportCounts {
  imported: number;
  alreadyStored: number;
  unreadable: string[];
}

/**
 * The entries every replica shares, in `gateway_secrets`. A change runs in a transaction holding the
 * row's lock, so two replicas storing two names at once both keep theirs. A removed entry keeps its
 * row (sealed null): versions only grow, through deletes and new puts alike.
 */
export class DatabaseSecretStore implements SecretStore {
  readonly kind = 'database';

  constructor(
    private readonly db: Database,
    private readonly clock: Clock,
  ) {}

  async read(lookup: string): Promise<Stored> {
    const row = (await this.db('gateway_secrets').where({ lookup }).first('sealed', 'version')) as
      SecretRow | undefined;
    return {
      entry: row?.sealed == null ? undefined : (JSON.parse(row.sealed) as SealedEntry),
      version: Number(row?.version ?? 0),
    };
  }

  async version(lookup: string): Promise<number> {
    const row = (await this.db('gateway_secrets').where({ lookup }).first('version')) as
      Pick<SecretRow, 'version'> | undefined;
    return Number(row?.version ?? 0);
  }

  change(lookup: string, change: Change): Promise<number | undefined> {
    return this.db.transaction(async (trx) => {
      // Insert-if-absent first, a write: on PostgreSQL the row then exists to be locked, so two first
      // puts queue on it; on SQLite a transaction whose first statement writes holds the write lock
      // from there on, against another process on the same file too (as the ledger's wallet lock).
      await trx('gateway_secrets')
        .insert({ lookup, sealed: null, version: 0, updated_at: this.clock.now().getTime() })
        .onConflict('lookup')
        .ignore();
      const row = (await trx('gateway_secrets')
        .where({ lookup })
        .forUpdate()
        .first('sealed', 'version')) as SecretRow;
      const next = change(row.sealed === null ? undefined : (JSON.parse(row.sealed) as SealedEntry));
      if (next === undefined) return undefined;
      const version = Number(row.version) + 1;
      await trx('gateway_secrets')
        .where({ lookup })
        .update({
          sealed: next === null ? null : JSON.stringify(next),
          version,
          updated_at: this.clock.now().getTime(),
        });
      return version;
    });
  }

  /**
   * Copies the file store's entries under `dir` into the database as they are (ciphertext: nothing is
   * decrypted, so the lookups and keys match only under the same GATEWAY_SECRET_KEY). A lookup the
   * database already has, deleted ones included, keeps its row: run again, it imports nothing, and
   * never brings back what was deleted or replaced since. The files stay where they are.
   */
  async importFiles(dir: string): Promise<ImportCounts> {
    const counts: ImportCounts = { imported: 0, alreadyStored: 0, unreadable: [] };
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return counts;
      throw err;
    }
    for (const name of names.sort()) {
      const lookup = LOOKUP_FILE.exec(name)?.[1];
      if (lookup === undefined) continue;
      const entry = parseEntry(readFileIfExists(join(dir, name)));
      if (entry === undefined) {
        counts.unreadable.push(name);
        continue;
      }
      const inserted = await this.db('gateway_secrets')
        .insert({ lookup, sealed: JSON.stringify(entry), version: 1, updated_at: this.clock.now().getTime() })
        .onConflict('lookup')
        .ignore()
        .returning('lookup');
      if (inserted.length === 1) counts.imported += 1;
      else counts.alreadyStored += 1;
    }
    return counts;
  }
}

function parseEntry(text: string | undefined): SealedEntry | undefined {
  if (text === undefined) return undefined;
  try {
    const parsed = sealedEntry.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
