import Sqlite3Client, { type SqliteQuery } from 'knex/lib/dialects/sqlite3/index.js';
import type { Database as SqliteConnection, RunResult, Statement } from 'sqlite3';

/** How many prepared statements one connection keeps; the least recently used is finalized first. */
export const MAX_PREPARED_STATEMENTS = 256;

/**
 * The prepared statements of one connection, by SQL, most recently used last. A statement runs to
 * completion before its call answers (`all` steps every row; `run` is used only for SQL that returns
 * none), so a kept statement holds no transaction or snapshot open between uses; the driver queues
 * calls on one statement, and SQLite prepares a statement again by itself after a schema change.
 */
class PreparedStatements {
  private readonly statements = new Map<string, Statement>();
  /** Statements prepared on this connection so far (what the tests count). */
  prepared = 0;

  /** Statements kept now. */
  get kept(): number {
    return this.statements.size;
  }

  constructor(private readonly connection: SqliteConnection) {}

  /** The statement of `sql`, prepared now if it is not kept. */
  take(sql: string, failed: (err: Error) => void): Statement {
    const kept = this.statements.get(sql);
    if (kept) {
      // Map order is recency: the statement moves to the end.
      this.statements.delete(sql);
      this.statements.set(sql, kept);
      return kept;
    }
    this.prepared++;
    // The driver reports SQL that does not prepare here (the caller's `failed` answers only once).
    const statement = this.connection.prepare(sql, (err: Error | null) => {
      if (err) failed(err);
    });
    this.statements.set(sql, statement);
    if (this.statements.size > MAX_PREPARED_STATEMENTS) {
      const [oldest, dropped] = this.statements.entries().next().value as [string, Statement];
      this.statements.delete(oldest);
      dropped.finalize();
    }
    return statement;
  }

  /** Drops `statement` of `sql` after an error: the SQL is prepared afresh next time. */
  drop(sql: string, statement: Statement): void {
    if (this.statements.get(sql) === statement) this.statements.delete(sql);
    statement.finalize();
  }

  /** Finalizes every kept statement: SQLite closes no connection that has some. */
  async finalizeAll(): Promise<void> {
    const statements = [...this.statements.values()];
    this.statements.clear();
    await Promise.all(
      statements.map((statement) => new Promise<void>((done) => statement.finalize(() => done()))),
    );
  }
}

const preparedOf = new WeakMap<SqliteConnection, PreparedStatements>();

/** The prepared statements of `connection`, made at its first query. */
function keptOn(connection: SqliteConnection): PreparedStatements {
  let statements = preparedOf.get(connection);
  if (!statements) preparedOf.set(connection, (statements = new PreparedStatements(connection)));
  return statements;
}

/** What `connection` prepared and keeps, for tests (undefined before its first query). */
export function preparedStatementsOf(
  connection: SqliteConnection,
): { readonly prepared: number; readonly kept: number } | undefined {
  return preparedOf.get(connection);
}

/**
 * knex's SQLite client, keeping each connection's prepared statements for the next query of the same
 * SQL. Hand-written because neither knex nor the sqlite3 driver reuses statements: the driver's
 * `all` and `run` prepare the SQL, run it and finalize it on every call, and parsing and planning are
 * about half of a short statement's cost (bench/README.md, "SQLite statements prepared once").
 * Everything else is knex's own client: how it reads `response` and `context` (the last row id and
 * the changes) after `_query` is unchanged.
 */
export class SqliteClientWithPreparedStatements extends Sqlite3Client {
  override _query(connection: SqliteConnection, query: SqliteQuery): Promise<SqliteQuery> {
    if (!query.sql) throw new Error('The query is empty');
    const method = callMethodOf(query);
    // `run` steps once: a statement that returns rows would stay open on the rows it did not read, so
    // such SQL runs as the driver runs it, finalized at once.
    if (method === 'run' && /\breturning\b/i.test(query.sql)) return super._query(connection, query);
    const kept = keptOn(connection);
    return new Promise((resolve, reject) => {
      let failedOnce = false;
      const failed = (err: Error) => {
        if (failedOnce) return;
        failedOnce = true;
        kept.drop(query.sql, statement);
        reject(err);
      };
      const statement: Statement = kept.take(query.sql, failed);
      statement[method](query.bindings ?? [], function (this: RunResult, err: Error | null, rows?: unknown) {
        if (err) return failed(err);
        query.response = rows;
        // knex reads `lastID` and `changes` of an insert, update or delete from here.
        query.context = this;
        resolve(query);
      });
    });
  }

  override async destroyRawConnection(connection: SqliteConnection): Promise<void> {
    await preparedOf.get(connection)?.finalizeAll();
    preparedOf.delete(connection);
    return super.destroyRawConnection(connection);
  }
}

/** The driver method knex's SQLite client calls for `query` (its `_query`, same choice). */
function callMethodOf(query: SqliteQuery): 'all' | 'run' {
  switch (query.method) {
    case 'insert':
    case 'update':
      return query.returning ? 'all' : 'run';
    case 'counter':
    case 'del':
      return 'run';
    default:
      return 'all';
  }
}
