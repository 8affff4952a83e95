import type { Migration } from './index.ts';

/** Wallet auth state that must survive restarts and be shared by replicas. */
export const authTables: Migration = {
  name: '0001-auth',
  async up(db) {
    await db.schema.createTable('siwe_nonces', (t) => {
      t.string('nonce', 64).primary();
      t.string('service', 32).notNullable();
      // Indexed because each new challenge sweeps the expired ones.
      t.bigInteger('expires_at').notNullable().index();
      t.bigInteger('used_at').nullable();
    });
    await db.schema.createTable('request_nonces', (t) => {
      // ERC-8128 replay protection: one row per (signer, nonce) seen within its validity window.
      t.string('key', 200).primary();
      t.bigInteger('expires_at').notNullable().index();
    });
    await db.schema.createTable('wallet_tokens', (t) => {
      t.string('id', 40).primary();
      t.string('token_hash', 64).notNullable().unique();
      t.string('wallet', 42).notNullable().index();
      t.string('label', 100).nullable();
      t.bigInteger('created_at').notNullable();
      t.bigInteger('last_used_at').nullable();
      t.bigInteger('revoked_at').nullable();
    });
    await db.schema.createTable('signing_keys', (t) => {
      t.string('purpose', 64).primary();
      t.string('kid', 64).notNullable();
      t.text('private_jwk').notNullable();
      t.bigInteger('created_at').notNullable();
    });
  },
  async down(db) {
    for (const table of ['signing_keys', 'wallet_tokens', 'request_nonces', 'siwe_nonces']) {
      await db.schema.dropTableIfExists(table);
    }
  },
};
