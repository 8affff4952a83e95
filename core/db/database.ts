import { chmodSync, closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import knex, { type Knex } from 'knex';
import { SigilError } from '@sigil/plugin-api';
import { kernelMigrations, type Migration } from './migrations/index.ts';
import { SqliteClientWithPreparedStatements } from './sqlite-statements.ts';

export type Database = Knex;

export interface DatabaseOptions {
  /** `postgres://…` for PostgreSQL; a file path, `sqlite:<path>` or `:memory:` for SQLite. */
  url: string;
  /** PostgreSQL schema to use (created when missing); lets tests and tenants share one database. */
  schema?: string;
}

export const isPostgresUrl = (url: string): boolean => /^postgres(ql)?:\/\//.test(url);

/** The SQL a database speaks, for the few statements that differ (row locks, triggers). */
export type Dialect = 'postgres' | 'sqlite';

const DIALECTS: Record<string, Dialect> = { postgresql: 'postgres', sqlite3: 'sqlite' };

/** The dialect of a database `openDatabase` opened (or of a transaction on it). */
export function dialectOf(db: Database): Dialect {
  // knex types its instance's client as `any`; `dialect` is a member of its Client class.
  const dialect = DIALECTS[(db.client as Knex.Client).dialect];
  if (dialect === undefined)
    throw new SigilError('internal', 'The database is neither PostgreSQL nor SQLite');
  return dialect;
}

/**
 * The database's own clock in unix milliseconds, as SQL for a statement: what replicas compare
 * heartbeats and lease expiries with, so no process compares its clock with another's. PostgreSQL:
 * the statement's start (inside a transaction too); SQLite: its clock, the same throughout a statement.
 */
export function databaseNowMs(db: Database): Knex.Raw {
  return dialectOf(db) === 'postgres'
    ? db.raw('(extract(epoch from statement_timestamp()) * 1000)::bigint')
    : db.raw("cast(unixepoch('subsec') * 1000 as integer)");
}

export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  const db = isPostgresUrl(options.url) ? await openPostgres(options) : openSqlite(options.url);
  try {
    await db.raw('select 1');
  } catch (cause) {
    await db.destroy();
    throw new SigilError('unavailable', `Cannot reach the database (${describeUrl(options.url)})`, {
      hint: 'Check DATABASE_URL, or unset it to use the embedded SQLite file under ./data',
      cause,
    });
  }
  return db;
}

function openSqlite(url: string): Database {
  const filename = url.replace(/^sqlite:(\/\/)?/, '');
  if (filename !== ':memory:') makePrivate(filename);
  return knex({
    client: SqliteClientWithPreparedStatements,
    connection: { filename },
    useNullAsDefault: true,
    // One connection: SQLite serialises writers anyway, and one connection makes every transaction
    // a true critical section instead of a SQLITE_BUSY retry loop.
    pool: {
      min: 1,
      max: 1,
      afterCreate: (
        conn: { exec(sql: string, cb: (err: Error | null) => void): void },
        done: (err: Error | null) => void,
      ) =>
        conn.exec('PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;', done),
    },
  });
}

/**
 * The database holds sessions' signing key, nonces and the ledger: only the service's user may read it.
 * The data directory is created 0700 (an existing one is left as it is: it may be shared, like /tmp;
 * sandboxes still reach the package cache below it: run as root, the sandbox runtime lends it to them),
 * and the file is created, or tightened, to 0600 before SQLite opens it; SQLite gives its -wal and
 * -shm files the database file's mode, and any left from before are tightened too.
 */
function makePrivate(filename: string): void {
  mkdirSync(dirname(filename), { recursive: true, mode: 0o700 });
  closeSync(openSync(filename, 'a', 0o600));
  for (const file of [filename, `${filename}-wal`, `${filename}-shm`, `${filename}-journal`]) {
    if (existsSync(file)) chmodSync(file, 0o600);
  }
}

async function openPostgres(options: DatabaseOptions): Promise<Database> {
  const schema = options.schema;
  if (schema !== undefined && !/^[a-z_][a-z0-9_]*$/.test(schema)) {
    throw new SigilError('config_invalid', `Invalid PostgreSQL schema name: ${schema}`);
  }
  if (schema !== undefined) {
    const admin = knex({ client: 'pg', connection: options.url, pool: { min: 0, max: 1 } });
    try {
      await admin.raw(`create schema if not exists "${schema}"`);
    } finally {
      await admin.destroy();
    }
  }
  return knex({
    client: 'pg',
    connection: options.url,
    pool: { min: 0, max: 10 },
    ...(schema === undefined ? {} : { searchPath: [schema] }),
  });
}

/** The URL without its password, safe for logs and errors. */
export function describeUrl(url: string): string {
  if (!isPostgresUrl(url)) return url;
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return 'postgres://(unparseable url)';
  }
}

class ListMigrationSource implements Knex.MigrationSource<Migration> {
  constructor(private readonly migrations: readonly Migration[]) {}
  getMigrations(): Promise<Migration[]> {
    return Promise.resolve([...this.migrations].sort((a, b) => a.name.localeCompare(b.name)));
  }
  getMigrationName(migration: Migration): string {
    return migration.name;
  }
  getMigration(migration: Migration): Promise<Knex.Migration> {
    return Promise.resolve({ up: migration.up, down: migration.down });
  }
}

/** Applies the kernel's migrations plus any extra ones (a service's or a plugin's); returns the names applied. */
export async function migrate(db: Database, extra: readonly Migration[] = []): Promise<string[]> {
  const all = [...kernelMigrations, ...extra];
  const names = new Set<string>();
  for (const migration of all) {
    if (names.has(migration.name))
      throw new SigilError('internal', `Duplicate migration name ${migration.name}`);
    names.add(migration.name);
  }
  const latest = async () => {
    const [, applied] = (await db.migrate.latest({ migrationSource: new ListMigrationSource(all) })) as [
      number,
      string[],
    ];
    return applied;
  };
  if (dialectOf(db) === 'sqlite') return latest();
  // Replicas starting at once on a fresh database would each create knex's bookkeeping tables, and
  // all but one fail ("relation already exists"): knex's own lock lives in one of those tables. One
  // replica migrates at a time, holding a PostgreSQL advisory lock on its schema in a transaction of
  // its own while knex migrates on other connections of the pool; the others then find it done.
  return db.transaction(async (lock) => {
    await lock.raw('select pg_advisory_xact_lock(?, hashtext(current_schema()))', [MIGRATION_LOCK_CLASS]);
    return latest();
  });
}

/** The first key of the migrations' advisory lock (the second is the schema's): "sigl" in ASCII. */
const MIGRATION_LOCK_CLASS = 0x7369676c;

/**
 * Whether a failed write broke a constraint (SQLite's SQLITE_CONSTRAINT, PostgreSQL's SQLSTATE class
 * 23). The sqlite3 driver gives no finer code, so a write that expects a duplicate key says so with
 * `onConflict(…).ignore()` instead of classifying the error.
 */
export function isConstraintViolation(err: unknown): boolean {
  const { code, errno } = (err ?? {}) as { code?: unknown; errno?: unknown };
  return (
    code === 'SQLITE_CONSTRAINT' || errno === 19 || (typeof code === 'string' && /^23[0-9A-Z]{3}$/.test(code))
  );
}
