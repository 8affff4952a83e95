import type { Migration } from './index.ts';

/**
 * What replicas of the services on one database agree through: which processes are up (each writes
 * its heartbeat, by the database's clock), and leases, each held by one holder until it expires,
 * with a fencing token that grows each time the lease is taken.
 */
export const replicasAndLeases: Migration = {
  name: '0005-replicas-and-leases',
  async up(db) {
    await db.schema.createTable('replicas', (t) => {
      t.string('id', 36).primary();
      // Which services the process serves (`runtime,gateway`), its host and pid: for people reading.
      t.string('services', 64).notNullable();
      t.string('host', 255).notNullable();
      t.integer('pid').notNullable();
      t.bigInteger('started_at').notNullable();
      t.bigInteger('heartbeat_at').notNullable().index();
    });
    await db.schema.createTable('leases', (t) => {
      t.string('name', 200).primary();
      t.string('holder', 100).notNullable();
      t.bigInteger('fence').notNullable();
      t.bigInteger('expires_at').notNullable();
    });
  },
  async down(db) {
    for (const table of ['leases', 'replicas']) await db.schema.dropTableIfExists(table);
  },
};
