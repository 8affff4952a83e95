// knex's SQLite client class, which its package types only through `Knex.Client`: the methods
// core/db/sqlite-statements.ts overrides.
declare module 'knex/lib/dialects/sqlite3/index.js' {
  import type { Knex } from 'knex';
  import type { Database } from 'sqlite3';

  /** A query as the client hands it to `_query`, and what `_query` sets on it for its processing. */
  export interface SqliteQuery {
    sql: string;
    bindings?: unknown[];
    method?: string;
    returning?: unknown;
    response?: unknown;
    context?: unknown;
  }

  export default class Client_SQLite3 extends Knex.Client {
    _query(connection: Database, query: SqliteQuery): Promise<SqliteQuery>;
    destroyRawConnection(connection: Database): Promise<void>;
  }
}
