import { expect } from 'chai';
import { randomBytes } from 'node:crypto';
import { describeUrl, dialectOf, migrate, openDatabase } from '../../core/db/database.ts';
import { SigilError } from '@sigil/plugin-api';
import { serviceMigrations } from '../../services/migrations.ts';
import { describeEachDatabase, openTestKernel } from '../support/kernel.ts';
import { describeScaleOut } from '../support/replicas.ts';

describeEachDatabase('database', (database) => {
  it('migrates at start-up, and migrating again applies nothing', async () => {
    const kernel = await openTestKernel({ database });
    try {
      for (const table of ['siwe_nonces', 'request_nonces', 'wallet_tokens', 'signing_keys']) {
        expect(await kernel.db.schema.hasTable(table), table).to.equal(true);
      }
      expect(await migrate(kernel.db, serviceMigrations)).to.deep.equal([]);
    } finally {
      await kernel.close();
    }
  });

  it('keeps each test kernel apart', async () => {
    const [a, b] = [await openTestKernel({ database }), await openTestKernel({ database })];
    try {
      await a.db('siwe_nonces').insert({ nonce: 'n-only-in-a', service: 'gateway', expires_at: 1 });
      expect(await b.db('siwe_nonces').where({ nonce: 'n-only-in-a' })).to.have.length(0);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('tells its dialect, in a transaction too', async () => {
    const kernel = await openTestKernel({ database });
    try {
      expect(dialectOf(kernel.db)).to.equal(database.name);
      expect(await kernel.db.transaction(async (trx) => dialectOf(trx))).to.equal(database.name);
    } finally {
      await kernel.close();
    }
  });

  it('refuses a duplicate migration name', async () => {
    const kernel = await openTestKernel({ database });
    try {
      const twin = { name: '0001-auth', up: async () => undefined, down: async () => undefined };
      const err = await migrate(kernel.db, [twin]).catch((e: unknown) => e);
      expect(err).to.be.instanceOf(SigilError);
    } finally {
      await kernel.close();
    }
  });
});

describe('database connection errors', () => {
  it('reports an unreachable PostgreSQL clearly, without its password', async () => {
    const err = await openDatabase({ url: 'postgres://sigil:canary-pw-91e2@127.0.0.1:1/sigil' }).catch(
      (e: unknown) => e,
    );
    expect(err).to.be.instanceOf(SigilError);
    expect((err as SigilError).code).to.equal('unavailable');
    expect((err as SigilError).message).not.to.include('canary-pw-91e2');
    expect((err as SigilError).hint).to.match(/DATABASE_URL/);
  });

  it('describes URLs without passwords', () => {
    expect(describeUrl('postgres://u:secret@h:5432/d')).to.equal('postgres://u:***@h:5432/d');
    expect(describeUrl('data/sigil.db')).to.equal('data/sigil.db');
  });
});

describeScaleOut('migrations of replicas starting at once', (postgresUrl) => {
  it('migrate a fresh database once, and none of the replicas fails', async function () {
    this.timeout(60_000);
    const schema = `migrate_race_${randomBytes(4).toString('hex')}`;
    // Opened one by one: creating the test's schema is not what races here.
    const replicas = [];
    for (let i = 0; i < 6; i++) replicas.push(await openDatabase({ url: postgresUrl, schema }));
    try {
      const applied = await Promise.all(replicas.map((db) => migrate(db, serviceMigrations)));
      // One replica applied every migration, the others found them applied.
      const all = applied.find((names) => names.length > 0) ?? [];
      expect(all).to.include('0001-auth');
      expect(applied.filter((names) => names.length > 0)).to.have.length(1);
      expect(await replicas[0]!('knex_migrations').count({ n: '*' }).first()).to.deep.equal({
        n: String(all.length),
      });
    } finally {
      await replicas[0]?.raw(`drop schema if exists "${schema}" cascade`);
      await Promise.all(replicas.map((db) => db.destroy()));
    }
  });
});
