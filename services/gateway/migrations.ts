import type { Migration } from '../../core/db/migrations/index.ts';

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
];
