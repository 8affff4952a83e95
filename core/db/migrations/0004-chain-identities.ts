import type { Migration } from './index.ts';

/**
 * The chain each chain-reading part of Sigil last read (`ledger`, `payments`): chain id, genesis
 * block hash and the contract it watches. A different chain under the same settings (a dev chain
 * started afresh) is detected at start-up, and what the database says about the old one is fenced.
 */
export const chainIdentities: Migration = {
  name: '0004-chain-identities',
  async up(db) {
    await db.schema.createTable('chain_identities', (t) => {
      t.string('name', 32).primary();
      t.integer('chain_id').notNullable();
      t.string('genesis_hash', 66).notNullable();
      t.string('contract', 42).notNullable();
      t.bigInteger('recorded_at').notNullable();
    });
  },
  async down(db) {
    await db.schema.dropTableIfExists('chain_identities');
  },
};
