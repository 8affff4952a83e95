/** The PostgreSQL server the suites that measure both databases use, when one answers. */
import knex from 'knex';

/** BENCH_DATABASE_URL, else TEST_DATABASE_URL (CI's), else a local server's `test` database. */
export const POSTGRES_URL =
  process.env.BENCH_DATABASE_URL ??
  process.env.TEST_DATABASE_URL ??
  'postgres://postgres@127.0.0.1:5432/test';

export async function postgresReachable(): Promise<boolean> {
  const probe = knex({ client: 'pg', connection: POSTGRES_URL, pool: { min: 0, max: 1 } });
  try {
    await probe.raw('select 1');
    return true;
  } catch {
    return false;
  } finally {
    await probe.destroy();
  }
}
