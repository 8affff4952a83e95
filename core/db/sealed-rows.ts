import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { z } from 'zod';
import type { Clock } from '../clock.ts';
import { readFileIfExists } from '../fs/durable.ts';
import type { Logger } from '../log.ts';
import type { Database } from './database.ts';

/** A lookup's sealed text (null when nothing is stored) and its version, which grows with every change. */
export interface SealedRow {
  sealed: string | null;
  version: number;
}

/**
 * How a row's sealed text changes: the text to store, null to remove it, or undefined to leave it as it
 * is. It is called with the current text while no other change of that lookup can run, so none is lost.
 */
export type SealedChange = (
  current: string | null,
) => string | null | undefined | Promise<string | null | undefined>;

/** What an import of sealed files found: rows created, rows the database had, files it could not read. */
interface ImportCounts {
  imported: number;
  alreadyStored: number;
  unreadable: string[];
}

/** Who imports: the log lines of an import that found files begin with `what` (e.g. "secrets"). */
export interface ImportReport {
  logger: Logger;
  what: string;
}

interface StoredRow {
  sealed: string | null;
  version: number | string;
}

/** The files of a one-machine store: one per lookup, named by the lookup (an HMAC, hex). */
const LOOKUP_FILE = /^([0-9a-f]{64})\.json$/;

/**
 * Sealed entries every replica shares, one row per HMAC lookup key in `table` (columns lookup, sealed,
 * version, updated_at): the gateway's secrets, the runtime's provider vault. A change runs in a
 * transaction holding the row's lock, so two replicas changing one lookup at once both keep theirs. A
 * removed entry keeps its row (sealed null): versions only grow, through removals and new writes alike,
 * so a copy of a version another replica cached is never mistaken for a newer one.
 */
export class SealedRows {
  constructor(
    private readonly db: Database,
    private readonly table: string,
    private readonly clock: Clock,
  ) {}

  async read(lookup: string): Promise<SealedRow> {
    const row = (await this.db(this.table).where({ lookup }).first('sealed', 'version')) as
      StoredRow | undefined;
    return { sealed: row?.sealed ?? null, version: Number(row?.version ?? 0) };
  }

  async version(lookup: string): Promise<number> {
    const row = (await this.db(this.table).where({ lookup }).first('version')) as
      Pick<StoredRow, 'version'> | undefined;
    return Number(row?.version ?? 0);
  }

  /** Applies `change` to the lookup's text: the new version, or undefined when it changed nothing. */
  change(lookup: string, change: SealedChange): Promise<number | undefined> {
    return this.db.transaction(async (trx) => {
      // Insert-if-absent first, a write: on PostgreSQL the row then exists to be locked, so two first
      // writes queue on it; on SQLite a transaction whose first statement writes holds the write lock
      // from there on, against another process on the same file too (as the ledger's wallet lock).
      await trx(this.table)
        .insert({ lookup, sealed: null, version: 0, updated_at: this.clock.now().getTime() })
        .onConflict('lookup')
        .ignore();
      const row = (await trx(this.table)
        .where({ lookup })
        .forUpdate()
        .first('sealed', 'version')) as StoredRow;
      const next = await change(row.sealed);
      if (next === undefined) return undefined;
      const version = Number(row.version) + 1;
      await trx(this.table)
        .where({ lookup })
        .update({ sealed: next, version, updated_at: this.clock.now().getTime() });
      return version;
    });
  }

  /**
   * Copies a one-machine store's files under `dir` (`<lookup>.json`) into the table as they are, each
   * checked against `entry` (a file that is no JSON of it is counted unreadable): nothing is decrypted. A lookup the table already has, removed ones included, keeps its row: run again, it
   * imports nothing, and never brings back what was removed or replaced since. The files stay. What it
   * found is logged, counted (no file's content), when there were files.
   */
  async importFiles(dir: string, entry: z.ZodType, report: ImportReport): Promise<void> {
    const { imported, alreadyStored, unreadable } = await this.copyFiles(dir, entry);
    if (imported + alreadyStored + unreadable.length === 0) return;
    report.logger.info(
      { dir, imported, alreadyStored, unreadable: unreadable.length },
      `${report.what}: the files under VAULT_PERSISTENCE_DIR were imported into the database (the files stay; entries it already had were kept)`,
    );
    if (unreadable.length > 0)
      report.logger.warn(
        { dir, files: unreadable },
        `${report.what}: files that are no sealed entry were not imported`,
      );
  }

  private async copyFiles(dir: string, entry: z.ZodType): Promise<ImportCounts> {
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
      const sealed = sealedJson(readFileIfExists(join(dir, name)), entry);
      if (sealed === undefined) {
        counts.unreadable.push(name);
        continue;
      }
      const inserted = await this.db(this.table)
        .insert({ lookup, sealed, version: 1, updated_at: this.clock.now().getTime() })
        .onConflict('lookup')
        .ignore()
        .returning('lookup');
      if (inserted.length === 1) counts.imported += 1;
      else counts.alreadyStored += 1;
    }
    return counts;
  }
}

/** The file's JSON as it will be stored, when it is an `entry`; undefined otherwise. */
function sealedJson(text: string | undefined, entry: z.ZodType): string | undefined {
  if (text === undefined) return undefined;
  try {
    const parsed = entry.safeParse(JSON.parse(text));
    return parsed.success ? JSON.stringify(parsed.data) : undefined;
  } catch {
    return undefined;
  }
}
