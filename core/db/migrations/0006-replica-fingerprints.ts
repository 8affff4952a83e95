import type { Migration } from './index.ts';

/**
 * What each replica's settings hash to, per service it serves (`{"runtime":"…","gateway":"…"}`): the
 * settings replicas of a service must agree on (prices, chain, public URLs, plugins, the public parts
 * of keys), never a secret. A replica compares its own with the live ones' at start-up and at every
 * heartbeat.
 */
export const replicaFingerprints: Migration = {
  name: '0006-replica-fingerprints',
  async up(db) {
    await db.schema.alterTable('replicas', (t) => {
      t.string('config_fingerprints', 400).nullable();
    });
  },
  async down(db) {
    await db.schema.alterTable('replicas', (t) => {
      t.dropColumn('config_fingerprints');
    });
  },
};
