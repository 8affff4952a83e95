import type { Migration } from '../../core/db/migrations/index.ts';
import { retryClaimerMigration } from '../../core/db/retries.ts';

/** Gateway state shared by replicas: MCP session enablement, pinned tool definitions, server verification. */
export const gatewayMigrations: readonly Migration[] = [
  {
    name: '0100-gateway-sessions-and-servers',
    async up(db) {
      await db.schema.createTable('gateway_sessions', (t) => {
        t.string('wallet', 42).notNullable();
        t.string('session_id', 128).notNullable();
        t.text('enabled').notNullable();
        t.bigInteger('updated_at').notNullable();
        t.primary(['wallet', 'session_id']);
      });
      await db.schema.createTable('gateway_servers', (t) => {
        t.string('server_id', 63).primary();
        t.string('version', 100).nullable();
        t.string('digest', 200).nullable();
        t.string('tier', 32).nullable();
        t.string('filter_status', 16).notNullable();
        t.string('filter_reason', 500).nullable();
        t.bigInteger('verified_at').nullable();
        t.text('last_error').nullable();
      });
      await db.schema.createTable('gateway_tool_pins', (t) => {
        t.string('server_id', 63).notNullable();
        t.string('version', 100).notNullable();
        t.string('tool_name', 128).notNullable();
        t.string('definition_hash', 64).notNullable();
        t.text('definition').notNullable();
        t.bigInteger('pinned_at').notNullable();
        t.primary(['server_id', 'version', 'tool_name']);
      });
      await db.schema.createTable('gateway_tool_quarantine', (t) => {
        t.string('server_id', 63).notNullable();
        t.string('version', 100).notNullable();
        t.string('tool_name', 128).notNullable();
        t.string('observed_hash', 64).notNullable();
        t.text('observed_definition').notNullable();
        t.string('reason', 500).notNullable();
        t.bigInteger('detected_at').notNullable();
        t.primary(['server_id', 'version', 'tool_name']);
      });
    },
    async down(db) {
      for (const table of [
        'gateway_tool_quarantine',
        'gateway_tool_pins',
        'gateway_servers',
        'gateway_sessions',
      ]) {
        await db.schema.dropTableIfExists(table);
      }
    },
  },
  {
    name: '0110-payment-settlements',
    async up(db) {
      // One row per payment authorization, written before the tool runs and before any money moves.
      await db.schema.createTable('payment_settlements', (t) => {
        t.string('id', 200).primary();
        t.string('state', 16).notNullable();
        t.string('payer', 64).notNullable();
        t.string('amount', 78).notNullable();
        t.string('resource', 300).notNullable();
        t.string('wallet', 42).nullable();
        t.text('authorization').notNullable();
        t.bigInteger('valid_before').notNullable();
        t.string('transaction', 80).nullable();
        t.text('reason').nullable();
        t.integer('attempts').notNullable().defaultTo(0);
        t.bigInteger('next_attempt_at').notNullable().defaultTo(0);
        t.bigInteger('created_at').notNullable();
        t.bigInteger('updated_at').notNullable();
        t.index(['state', 'next_attempt_at']);
      });
    },
    async down(db) {
      await db.schema.dropTableIfExists('payment_settlements');
    },
  },
  {
    name: '0120-payment-chain-settlements',
    async up(db) {
      // The settlements the chain holds, as the reconciler last read them, and how far it has read:
      // each reconciliation reads only the blocks since (and a margin for reorganizations).
      await db.schema.createTable('payment_chain_settlements', (t) => {
        t.string('id', 200).primary();
        t.string('payer', 64).notNullable();
        t.string('amount', 78).notNullable();
        t.string('transaction', 80).notNullable();
        t.bigInteger('block').notNullable().index();
      });
      await db.schema.createTable('payment_chain_cursor', (t) => {
        t.string('name', 32).primary();
        t.bigInteger('scanned_to').notNullable();
      });
    },
    async down(db) {
      await db.schema.dropTableIfExists('payment_chain_cursor');
      await db.schema.dropTableIfExists('payment_chain_settlements');
    },
  },
  {
    name: '0130-payment-results',
    async up(db) {
      // A paid call's result, kept with its settlement for a while (written as the settlement
      // starts): a payer whose answer was lost (a crash, a dropped connection) fetches it by payment id.
      await db.schema.alterTable('payment_settlements', (t) => {
        t.text('result').nullable();
        t.bigInteger('result_expires_at').nullable().index();
      });
    },
    async down(db) {
      await db.schema.alterTable('payment_settlements', (t) => {
        t.dropIndex(['result_expires_at']);
        t.dropColumn('result');
        t.dropColumn('result_expires_at');
      });
    },
  },
  {
    name: '0140-payment-result-sizes',
    async up(db) {
      // The bytes of each kept result, summed per payer to cap what one payer's results may hold.
      await db.schema.alterTable('payment_settlements', (t) => {
        t.integer('result_bytes').nullable();
        t.index(['payer', 'result_expires_at']);
      });
    },
    async down(db) {
      await db.schema.alterTable('payment_settlements', (t) => {
        t.dropIndex(['payer', 'result_expires_at']);
        t.dropColumn('result_bytes');
      });
    },
  },
  {
    name: '0150-payment-chain-replaced',
    async up(db) {
      // Set on the records of a chain that was replaced (a dev chain started afresh): they stay as
      // history, but the reconciler compares only the current chain's records with the chain.
      await db.schema.alterTable('payment_settlements', (t) => {
        t.bigInteger('chain_replaced_at').nullable();
      });
    },
    async down(db) {
      await db.schema.alterTable('payment_settlements', (t) => {
        t.dropColumn('chain_replaced_at');
      });
    },
  },
  {
    name: '0160-gateway-server-protocol',
    async up(db) {
      // The MCP protocol a verified version speaks (its era and the revision negotiated), probed once
      // at verification: every later start of that version uses it without probing. Null: verified
      // before eras were probed (it ran at 2025-11-25 and older, which is what it gets).
      await db.schema.alterTable('gateway_servers', (t) => {
        t.string('protocol_era', 16).nullable();
        t.string('protocol_version', 32).nullable();
      });
    },
    async down(db) {
      await db.schema.alterTable('gateway_servers', (t) => {
        t.dropColumn('protocol_era');
        t.dropColumn('protocol_version');
      });
    },
  },
  retryClaimerMigration('0170-payment-settlement-claimer', 'payment_settlements'),
  {
    name: '0180-gateway-secrets',
    async up(db) {
      // A wallet's secrets for one server, shared by every replica: under the HMAC lookup key of
      // (wallet, server), never the address; sealed under GATEWAY_SECRET_KEY as the files were. A
      // delete keeps the row (sealed null) so that `version` only grows: a process started with
      // version n is known outdated by any later change, a delete and a new put included.
      await db.schema.createTable('gateway_secrets', (t) => {
        t.string('lookup', 64).primary();
        t.text('sealed').nullable();
        t.bigInteger('version').notNullable();
        t.bigInteger('updated_at').notNullable();
      });
    },
    async down(db) {
      await db.schema.dropTableIfExists('gateway_secrets');
    },
  },
  {
    name: '0190-gateway-verification-across-replicas',
    async up(db) {
      // A server version's tool set is pinned by inserting this row, once, whichever replica sees the
      // version first: the insert that loses the race does nothing, and its replica compares its tools
      // with the winner's pins. Versions pinned before it existed get their row from their pins.
      await db.schema.createTable('gateway_tool_pin_sets', (t) => {
        t.string('server_id', 63).notNullable();
        t.string('version', 100).notNullable();
        t.bigInteger('pinned_at').notNullable();
        t.primary(['server_id', 'version']);
      });
      await db('gateway_tool_pin_sets').insert(
        db('gateway_tool_pins')
          .groupBy('server_id', 'version')
          .select('server_id', 'version', db.raw('min(pinned_at) as pinned_at')),
      );
      // `verifications` grows with each verification recorded: a replica waiting for another's sees
      // it done. `entry_hash`: the catalog entry verified, so a replica starting with another entry
      // (a new version range) verifies it anew rather than take the recorded verdict.
      await db.schema.alterTable('gateway_servers', (t) => {
        t.bigInteger('verifications').notNullable().defaultTo(0);
        t.string('entry_hash', 64).nullable();
      });
    },
    async down(db) {
      await db.schema.alterTable('gateway_servers', (t) => {
        t.dropColumn('verifications');
        t.dropColumn('entry_hash');
      });
      await db.schema.dropTableIfExists('gateway_tool_pin_sets');
    },
  },
  {
    name: '0191-payment-kept-bytes-covering-index',
    async up(db) {
      // The settling mark sums a payer's kept result sizes: with result_bytes in the index, that sum
      // reads the index alone, not each record (whose kept result makes it a page of its own).
      await db.schema.alterTable('payment_settlements', (t) => {
        t.index(['payer', 'result_expires_at', 'result_bytes']);
      });
      await db.schema.alterTable('payment_settlements', (t) => {
        t.dropIndex(['payer', 'result_expires_at']);
      });
    },
    async down(db) {
      await db.schema.alterTable('payment_settlements', (t) => {
        t.index(['payer', 'result_expires_at']);
      });
      await db.schema.alterTable('payment_settlements', (t) => {
        t.dropIndex(['payer', 'result_expires_at', 'result_bytes']);
      });
    },
  },
];
