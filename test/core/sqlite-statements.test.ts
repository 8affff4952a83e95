import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import knex, { type Knex } from 'knex';
import type { Database as SqliteConnection } from 'sqlite3';
import { openDatabase } from '../../core/db/database.ts';
import {
  MAX_PREPARED_STATEMENTS,
  preparedStatementsOf,
  type SqliteClientWithPreparedStatements,
} from '../../core/db/sqlite-statements.ts';

/**
 * The kernel's SQLite client keeps each connection's prepared statements (issue 30): it must answer
 * every query as knex's own SQLite client does, and never hold a lock or a snapshot between queries.
 */
describe('SQLite statements prepared once a connection', () => {
  let dir: string;
  const opened: Knex[] = [];
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'sigil-sqlite-statements-'));
  });
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((db) => db.destroy()));
    rmSync(dir, { recursive: true, force: true });
  });

  const kernelDb = async (name = 'kernel.db') => {
    const db = await openDatabase({ url: join(dir, name) });
    opened.push(db);
    return db;
  };
  /** knex's own SQLite client, as the kernel configures its connection otherwise. */
  const stockDb = (name: string, afterCreate = 'PRAGMA journal_mode = WAL;') => {
    const db = knex({
      client: 'sqlite3',
      connection: { filename: join(dir, name) },
      useNullAsDefault: true,
      pool: {
        min: 1,
        max: 1,
        afterCreate: (conn: SqliteConnection, done: (err: Error | null) => void) =>
          conn.exec(afterCreate, done),
      },
    });
    opened.push(db);
    return db;
  };
  /** The one pooled connection's counts (both databases here have one connection). */
  const counts = async (db: Knex) => {
    const connection = (await db.client.acquireConnection()) as SqliteConnection;
    db.client.releaseConnection(connection);
    const statements = preparedStatementsOf(connection);
    return { prepared: statements?.prepared ?? 0, kept: statements?.kept ?? 0 };
  };

  /** A script of queries of every kind knex sends; each answer, or each error's code and number. */
  async function script(db: Knex): Promise<unknown[]> {
    const answers: unknown[] = [];
    const step = async (query: () => Promise<unknown>) => {
      try {
        answers.push(await query());
      } catch (err) {
        const { code, errno } = err as { code?: string; errno?: number };
        answers.push({ failed: code, errno });
      }
    };
    await db.schema.createTable('items', (table) => {
      table.increments('id');
      table.string('name').unique();
      table.integer('uses').defaultTo(0);
    });
    for (const name of ['a', 'b', 'c']) await step(() => db('items').insert({ name }));
    await step(() => db('items').insert({ name: 'd' }).returning('*'));
    await step(() => db('items').insert({ name: 'a' }));
    await step(() => db('items').where({ name: 'a' }).update({ name: 'z' }));
    await step(() => db('items').where({ name: 'nobody' }).update({ name: 'y' }));
    await step(() => db('items').where({ name: 'b' }).update({ uses: 5 }).returning(['id', 'uses']));
    await step(() => db('items').where({ name: 'b' }).increment('uses', 2));
    await step(() => db('items').where({ name: 'c' }).del());
    await step(() => db('items').where({ name: 'd' }).del().returning('id'));
    await step(() => db.raw('select name, uses from items where id > ? order by id', [0]));
    await step(() => db.raw('select no_such_column from items'));
    await step(() => db.raw('select no_such_column from items'));
    await step(() => db('items').select('name').orderBy('id'));
    await step(() => db.transaction(async (trx) => trx('items').insert({ name: 'kept' })));
    await step(() =>
      db.transaction(async (trx) => {
        await trx('items').insert({ name: 'rolled back' });
        await trx('items').insert({ name: 'kept' });
      }),
    );
    await step(() => db('items').select('name').orderBy('id'));
    return answers;
  }

  it("answers every kind of query as knex's own SQLite client does, errors included", async () => {
    const ours = await script(await kernelDb());
    const theirs = await script(stockDb('stock.db'));
    expect(ours).to.deep.equal(theirs);
    // The script's answers are the ones a reader expects (the comparison is not between two blanks).
    expect(ours.at(-1)).to.deep.equal([{ name: 'z' }, { name: 'b' }, { name: 'kept' }]);
    expect(ours).to.deep.include({ failed: 'SQLITE_CONSTRAINT', errno: 19 });
  });

  it('prepares each SQL once a connection, binds each query afresh, and keeps at most MAX_PREPARED_STATEMENTS', async () => {
    const db = await kernelDb();
    await db.schema.createTable('numbers', (table) => table.integer('n'));
    await db('numbers').insert([1, 2, 3].map((n) => ({ n })));
    const before = await counts(db);
    for (const n of [1, 2, 3, 2, 1])
      expect(await db('numbers').where({ n }).select('n')).to.deep.equal([{ n }]);
    expect((await counts(db)).prepared).to.equal(before.prepared + 1);

    for (let i = 0; i < MAX_PREPARED_STATEMENTS + 5; i++) await db.raw(`select ${i} as i`);
    const full = await counts(db);
    expect(full.kept).to.equal(MAX_PREPARED_STATEMENTS);
    // The least recently used were finalized: the first is prepared again, the last is kept.
    await db.raw(`select ${MAX_PREPARED_STATEMENTS + 4} as i`);
    expect((await counts(db)).prepared).to.equal(full.prepared);
    await db.raw('select 0 as i');
    expect((await counts(db)).prepared).to.equal(full.prepared + 1);
  });

  it('prepares a statement that failed again, and a kept one sees a change of schema', async () => {
    const db = await kernelDb();
    const read = () => db.raw('select * from later');
    const failed = await read().catch((err: { code?: string }) => err);
    expect(failed).to.have.property('code', 'SQLITE_ERROR');
    await db.schema.createTable('later', (table) => table.integer('a'));
    await db('later').insert({ a: 1 });
    expect(await read()).to.deep.equal([{ a: 1 }]);
    await db.schema.alterTable('later', (table) => table.integer('b').defaultTo(7));
    expect(await read()).to.deep.equal([{ a: 1, b: 7 }]);
  });

  /**
   * A delete with RETURNING given to the driver's `run`, which steps once: knex's builder sends none
   * (its SQLite client drops `returning` from a delete), but SQL of a client's own may.
   */
  async function deleteReturning(db: Knex, n: number): Promise<void> {
    const client = db.client as SqliteClientWithPreparedStatements;
    const connection = (await client.acquireConnection()) as SqliteConnection;
    try {
      await client._query(connection, {
        sql: 'delete from rows where n = ? returning n',
        bindings: [n],
        method: 'del',
      });
    } finally {
      client.releaseConnection(connection);
    }
  }

  it('holds no write lock and no read snapshot between queries', async () => {
    const db = await kernelDb('shared.db');
    await db.schema.createTable('rows', (table) => table.integer('n'));
    // Another connection to the file that waits for no lock (busy_timeout 0): it fails at once if
    // ours holds one.
    const other = stockDb('shared.db', 'PRAGMA busy_timeout = 0;');
    for (let i = 0; i < 3; i++) {
      await db('rows').insert({ n: i });
      await db('rows').where({ n: i }).update({ n: i });
      await db('rows').insert({ n: 100 });
      await deleteReturning(db, 100);
      await db('rows').select('n');
      await other.transaction(async (trx) => trx('rows').insert({ n: 10 + i }));
      // A checkpoint that truncates the log waits for no reader of an older snapshot: none is left.
      const [checkpoint] = (await other.raw('PRAGMA wal_checkpoint(TRUNCATE)')) as { busy: number }[];
      expect(checkpoint?.busy).to.equal(0);
    }
    expect((await db('rows').count({ count: '*' }))[0]).to.deep.equal({ count: 6 });
  });

  it('finalizes its statements when the connection closes, so SQLite closes it cleanly', async () => {
    const db = await kernelDb('closing.db');
    await db.schema.createTable('rows', (table) => table.integer('n'));
    await db('rows').insert({ n: 1 });
    await db('rows').select('n');
    expect((await counts(db)).kept).to.be.greaterThan(0);
    expect(existsSync(join(dir, 'closing.db-wal'))).to.equal(true);
    await db.destroy();
    opened.splice(opened.indexOf(db), 1);
    // The last connection's clean close checkpoints and removes the write-ahead log.
    expect(existsSync(join(dir, 'closing.db-wal'))).to.equal(false);
  });
});
