import type { Migration } from './index.ts';

/** Who asked for each SIWE challenge, so one client's unexpired challenges can be counted and bounded. */
export const siweNonceClients: Migration = {
  name: '0002-siwe-nonce-clients',
  async up(db) {
    await db.schema.alterTable('siwe_nonces', (t) => {
      // The client's address as the HTTP server saw it; null for challenges issued before this column.
      t.string('client', 64).nullable();
      t.index(['service', 'client', 'expires_at']);
      t.index(['service', 'expires_at']);
    });
  },
  async down(db) {
    await db.schema.alterTable('siwe_nonces', (t) => {
      t.dropIndex(['service', 'expires_at']);
      t.dropIndex(['service', 'client', 'expires_at']);
      t.dropColumn('client');
    });
  },
};
