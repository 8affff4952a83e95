import type { Migration } from './index.ts';

/**
 * SIWE challenges are stateless (their nonce carries its expiry and a MAC): siwe_nonces keeps only the
 * nonces already used, until they expire, so the client column and its indexes of 0002 go. Rows left
 * from unused challenges of the old kind are deleted (they would never verify now).
 */
export const siweStatelessChallenges: Migration = {
  name: '0003-siwe-stateless-challenges',
  async up(db) {
    await db('siwe_nonces').whereNull('used_at').delete();
    await db.schema.alterTable('siwe_nonces', (t) => {
      t.dropIndex(['service', 'expires_at']);
      t.dropIndex(['service', 'client', 'expires_at']);
      t.dropColumn('client');
    });
  },
  async down(db) {
    await db.schema.alterTable('siwe_nonces', (t) => {
      t.string('client', 64).nullable();
      t.index(['service', 'client', 'expires_at']);
      t.index(['service', 'expires_at']);
    });
  },
};
