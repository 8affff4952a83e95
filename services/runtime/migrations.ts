import type { Migration } from '../../core/db/migrations/index.ts';
import { retryClaimerMigration } from '../../core/db/retries.ts';
import { reflectMemoryMigration, reflectMemorySealingMigration } from './reflect/migration.ts';

/**
 * Runtime state shared by replicas: wallet-owned agents, the wallet ledger, canvas runs and the chat
 * history. Money columns are integer base units of the ledger's token (bigint: SQLite's 64-bit
 * INTEGER, PostgreSQL's int8); times are unix milliseconds of the kernel's clock, except EIP-3009
 * validity bounds (unix seconds, as signed).
 */
export const runtimeMigrations: readonly Migration[] = [
  {
    name: '0200-runtime-agents-and-ledger',
    async up(db) {
      // Minimal agents: the chat issue extends this table.
      await db.schema.createTable('agents', (t) => {
        t.string('id', 36).primary();
        t.string('wallet', 42).notNullable().index();
        t.string('name', 100).notNullable();
        t.string('model', 200).notNullable();
        t.bigInteger('created_at').notNullable();
        t.bigInteger('updated_at').notNullable();
      });
      // Null limit: no limit for that window.
      await db.schema.createTable('agent_budgets', (t) => {
        t.string('agent_id', 36).primary().references('agents.id').onDelete('CASCADE');
        t.bigInteger('daily_limit').nullable();
        t.bigInteger('weekly_limit').nullable();
        t.bigInteger('monthly_limit').nullable();
        t.bigInteger('updated_at').notNullable();
      });
      // One row per wallet: the cached on-chain balance, and running totals of the entries below,
      // changed only in the transaction that appends the entry (audit() recomputes them by SUM). Every
      // write to a wallet's money locks this row first.
      await db.schema.createTable('ledger_wallets', (t) => {
        t.string('wallet', 42).primary();
        t.bigInteger('on_chain_balance').notNullable().defaultTo(0);
        t.bigInteger('balance_block').notNullable().defaultTo(0);
        t.bigInteger('balance_updated_at').notNullable().defaultTo(0);
        t.bigInteger('unsettled_spend').notNullable().defaultTo(0);
        t.bigInteger('settled_spend').notNullable().defaultTo(0);
        t.bigInteger('pending_withdrawals').notNullable().defaultTo(0);
        t.bigInteger('withdrawn').notNullable().defaultTo(0);
        t.bigInteger('created_at').notNullable();
        t.bigInteger('updated_at').notNullable();
      });
      // The HD index of a wallet's deposit address, assigned once (never reused: the sequence only grows).
      await db.schema.createTable('ledger_deposit_addresses', (t) => {
        t.increments('deposit_index').primary();
        t.string('wallet', 42).notNullable().unique();
        t.string('address', 42).nullable().unique();
        t.bigInteger('created_at').notNullable();
      });
      // Append-only: rows are inserted, never updated or deleted.
      await db.schema.createTable('ledger_entries', (t) => {
        t.bigIncrements('id').primary();
        t.string('wallet', 42).notNullable();
        t.string('kind', 24).notNullable();
        t.bigInteger('amount').notNullable();
        t.string('agent_id', 36).nullable();
        t.string('idempotency_key', 240).notNullable();
        t.string('reference', 100).nullable();
        t.bigInteger('created_at').notNullable();
        t.unique(['wallet', 'idempotency_key']);
        t.index(['wallet', 'id']);
        t.index(['agent_id', 'kind', 'created_at']);
        t.check('?? > 0', ['amount'], 'ledger_entries_amount_positive');
      });
      // Money leaving a deposit address: withdrawals to the owner, sweeps to the treasury. Recorded
      // (with the EIP-3009 nonce it will be signed with) before anything is signed or sent.
      await db.schema.createTable('ledger_transfers', (t) => {
        t.string('id', 36).primary();
        t.string('wallet', 42).notNullable();
        t.string('kind', 16).notNullable();
        t.bigInteger('amount').notNullable();
        t.string('from_address', 42).notNullable();
        t.string('to_address', 42).notNullable();
        t.string('state', 16).notNullable();
        t.string('idempotency_key', 200).nullable();
        t.string('nonce', 66).notNullable().unique();
        t.bigInteger('valid_before').notNullable();
        t.string('tx_hash', 66).nullable();
        t.bigInteger('block_number').nullable();
        t.text('reason').nullable();
        t.integer('attempts').notNullable().defaultTo(0);
        t.bigInteger('next_attempt_at').notNullable().defaultTo(0);
        t.bigInteger('created_at').notNullable();
        t.bigInteger('updated_at').notNullable();
        t.unique(['wallet', 'kind', 'idempotency_key']);
        t.index(['state', 'next_attempt_at']);
        t.index(['wallet', 'kind', 'created_at']);
        t.check('?? > 0', ['amount'], 'ledger_transfers_amount_positive');
      });
      // How far the watcher has read Transfer events, so a restart resumes there.
      await db.schema.createTable('ledger_chain_cursor', (t) => {
        t.string('name', 64).primary();
        t.bigInteger('block').notNullable();
        t.bigInteger('updated_at').notNullable();
      });
    },
    async down(db) {
      for (const table of [
        'ledger_chain_cursor',
        'ledger_transfers',
        'ledger_entries',
        'ledger_deposit_addresses',
        'ledger_wallets',
        'agent_budgets',
        'agents',
      ]) {
        await db.schema.dropTableIfExists(table);
      }
    },
  },
  {
    name: '0210-ledger-transfer-chain-bookkeeping',
    async up(db) {
      await db.schema.alterTable('ledger_transfers', (t) => {
        // The newest block when the transfer was recorded: where a search for its events starts.
        t.bigInteger('from_block').notNullable().defaultTo(0);
        // A cancelAuthorization sent for a transfer that can no longer go through.
        t.string('cancel_tx_hash', 66).nullable();
        // When the transfer transaction was last sent, to send it again if it never gets mined.
        t.bigInteger('sent_at').nullable();
      });
    },
    async down(db) {
      await db.schema.alterTable('ledger_transfers', (t) => {
        t.dropColumn('sent_at');
        t.dropColumn('cancel_tx_hash');
        t.dropColumn('from_block');
      });
    },
  },
  {
    name: '0220-ledger-agent-daily-spend',
    async up(db) {
      // An agent's charges summed per calendar UTC day, changed in the charge's own transaction: a
      // day, a week or a month of spend is then a sum of at most 31 rows (audit() checks them).
      await db.schema.createTable('agent_daily_spend', (t) => {
        t.string('agent_id', 36).notNullable();
        t.bigInteger('day').notNullable();
        t.bigInteger('amount').notNullable();
        t.primary(['agent_id', 'day']);
      });
    },
    async down(db) {
      await db.schema.dropTableIfExists('agent_daily_spend');
    },
  },
  {
    name: '0230-ledger-spend-holds',
    async up(db) {
      // Money a running request may spend (a chat's estimate), reserved before the work starts: one
      // row per open hold, deleted in the transaction that settles or releases it, so the table holds
      // only what is in flight. held_spend is their running total per wallet (audit() recomputes it).
      await db.schema.createTable('ledger_holds', (t) => {
        t.string('id', 36).primary();
        t.string('wallet', 42).notNullable();
        t.string('agent_id', 36).notNullable().index();
        t.bigInteger('amount').notNullable();
        t.string('idempotency_key', 240).notNullable();
        t.bigInteger('created_at').notNullable();
        // When the expiry sweep releases it: a holder that crashed or hung never settles.
        t.bigInteger('expires_at').notNullable().index();
        t.unique(['wallet', 'idempotency_key']);
        t.check('?? > 0', ['amount'], 'ledger_holds_amount_positive');
      });
      await db.schema.alterTable('ledger_wallets', (t) => {
        t.bigInteger('held_spend').notNullable().defaultTo(0);
      });
    },
    async down(db) {
      await db.schema.alterTable('ledger_wallets', (t) => {
        t.dropColumn('held_spend');
      });
      await db.schema.dropTableIfExists('ledger_holds');
    },
  },
  {
    name: '0240-ledger-hold-settle-cost',
    async up(db) {
      // The real cost of work whose settlement failed: the expiry sweep charges it instead of
      // releasing the hold (null while the work runs: a hold without one is released).
      await db.schema.alterTable('ledger_holds', (t) => {
        t.bigInteger('settle_cost');
      });
    },
    async down(db) {
      await db.schema.alterTable('ledger_holds', (t) => {
        t.dropColumn('settle_cost');
      });
    },
  },
  {
    name: '0250-canvas',
    async up(db) {
      // Saved workflow documents: one row per version; a delete marks every version of the id.
      await db.schema.createTable('canvas_workflows', (t) => {
        t.string('id', 36).notNullable();
        t.integer('version').notNullable();
        t.string('wallet', 42).notNullable();
        t.string('name', 200).notNullable();
        t.text('document').notNullable();
        t.bigInteger('created_at').notNullable();
        t.bigInteger('deleted_at').nullable();
        t.primary(['id', 'version']);
        t.index(['wallet', 'deleted_at']);
      });
      // A run keeps the document it runs (a saved workflow may change or go meanwhile).
      await db.schema.createTable('canvas_runs', (t) => {
        t.string('id', 36).primary();
        t.string('wallet', 42).notNullable();
        t.string('agent_id', 36).notNullable();
        t.string('workflow_id', 36).nullable();
        t.integer('workflow_version').nullable();
        t.text('document').notNullable();
        t.text('inputs').notNullable();
        t.string('status', 24).notNullable();
        t.text('error').nullable();
        // Where /canvas/preview/<token>/ serves the run's workspace from.
        t.string('preview_token', 64).notNullable().unique();
        t.bigInteger('created_at').notNullable();
        t.bigInteger('updated_at').notNullable();
        t.bigInteger('ended_at').nullable();
        t.index(['wallet', 'created_at']);
        t.index(['status']);
      });
      await db.schema.createTable('canvas_node_runs', (t) => {
        t.string('run_id', 36).notNullable().references('canvas_runs.id').onDelete('CASCADE');
        t.string('node_id', 63).notNullable();
        t.string('state', 24).notNullable();
        t.integer('attempt').notNullable().defaultTo(0);
        t.text('outputs').nullable();
        t.text('error').nullable();
        // The owner's decision, for an approval node.
        t.text('decision').nullable();
        t.bigInteger('started_at').nullable();
        t.bigInteger('ended_at').nullable();
        t.primary(['run_id', 'node_id']);
      });
      // Append-only: what the run's SSE stream sends, numbered per run (the events' ids).
      await db.schema.createTable('canvas_events', (t) => {
        t.string('run_id', 36).notNullable().references('canvas_runs.id').onDelete('CASCADE');
        t.integer('seq').notNullable();
        t.string('type', 40).notNullable();
        t.text('data').notNullable();
        t.bigInteger('created_at').notNullable();
        t.primary(['run_id', 'seq']);
      });
      await db.schema.createTable('canvas_artifacts', (t) => {
        t.string('id', 36).primary();
        t.string('run_id', 36).notNullable().references('canvas_runs.id').onDelete('CASCADE');
        t.string('node_id', 63).notNullable();
        t.string('name', 200).notNullable();
        t.string('content_type', 200).notNullable();
        t.bigInteger('bytes').notNullable();
        t.string('sha256', 64).notNullable();
        t.binary('content').notNullable();
        t.bigInteger('created_at').notNullable();
        t.index(['run_id']);
      });
    },
    async down(db) {
      for (const table of [
        'canvas_artifacts',
        'canvas_events',
        'canvas_node_runs',
        'canvas_runs',
        'canvas_workflows',
      ])
        await db.schema.dropTableIfExists(table);
    },
  },
  {
    name: '0260-chat-history',
    async up(db) {
      // One row per wallet: every write to its chat sessions first takes the next number here (the
      // row locked to the commit), so those writes run one at a time across replicas, and a session's
      // change_seq orders it by its last change (the self-improvement pipeline's watermark).
      await db.schema.createTable('chat_history_wallets', (t) => {
        t.string('wallet', 42).primary();
        t.bigInteger('last_change').notNullable();
      });
      await db.schema.createTable('chat_sessions', (t) => {
        t.string('id', 36).primary();
        t.string('wallet', 42).notNullable();
        t.string('agent_id', 36).notNullable().references('agents.id');
        t.string('model', 200).notNullable();
        t.string('provider', 100).notNullable();
        // JSON array of gateway server ids.
        t.text('servers').notNullable();
        // Sealed under the session's data key when key_id is set, like every message's content.
        t.text('system').nullable();
        t.integer('user_messages').notNullable().defaultTo(0);
        t.integer('last_seq').notNullable().defaultTo(0);
        // Envelope encryption: the key-encryption key's id and the session's data key wrapped under
        // it (AES-256-GCM); both null for a plain-text session.
        t.string('key_id', 64).nullable();
        t.text('wrapped_key').nullable();
        t.bigInteger('change_seq').notNullable();
        t.bigInteger('created_at').notNullable();
        t.bigInteger('last_used_at').notNullable();
        t.bigInteger('ended_at').nullable();
        // closed | expired; null while open.
        t.string('end_reason', 16).nullable();
        t.index(['wallet', 'agent_id', 'created_at']);
        t.index(['wallet', 'change_seq', 'id']);
      });
      // The messages of completed requests, numbered per session; content is the LlmMessage's JSON
      // (text, tool calls, tool results), sealed when the session has a data key, bound to its
      // session, seq and role. cost: the request's platform cost, on the last message it stored.
      await db.schema.createTable('chat_messages', (t) => {
        t.string('session_id', 36).notNullable().references('chat_sessions.id').onDelete('CASCADE');
        t.integer('seq').notNullable();
        t.string('message_id', 100).notNullable();
        t.string('role', 16).notNullable();
        t.text('content').notNullable();
        t.bigInteger('cost').nullable();
        t.bigInteger('created_at').notNullable();
        t.primary(['session_id', 'seq']);
        t.index(['session_id', 'message_id']);
      });
    },
    async down(db) {
      for (const table of ['chat_messages', 'chat_sessions', 'chat_history_wallets'])
        await db.schema.dropTableIfExists(table);
    },
  },
  {
    name: '0270-wallet-settings-and-reflect-runs',
    async up(db) {
      // PUT /wallet/settings: the wallet's whole settings document, as validated JSON.
      await db.schema.createTable('wallet_settings', (t) => {
        t.string('wallet', 42).primary();
        t.text('document').notNullable();
        t.bigInteger('updated_at').notNullable();
      });
      // When each wallet's next self-improvement run is due (null: none is); after_each also keeps
      // since when it waits, so further messages push the run back no further than the max delay.
      await db.schema.createTable('reflect_schedules', (t) => {
        t.string('wallet', 42).primary();
        t.bigInteger('next_run_at').nullable().index();
        t.bigInteger('pending_since').nullable();
        t.bigInteger('updated_at').notNullable();
      });
      // due_at: queued, when it may start; running, when its lease ends (renewed while its replica
      // lives); waiting_for_unlock, when it is tried again. attempt grows with every claim and fences
      // each write of the claimer, so a replica that lost its lease never records anything.
      await db.schema.createTable('reflect_runs', (t) => {
        t.string('id', 36).primary();
        t.string('wallet', 42).notNullable();
        t.string('trigger', 16).notNullable();
        t.string('status', 24).notNullable();
        t.string('pipeline_version', 100).nullable();
        t.integer('attempt').notNullable().defaultTo(0);
        t.integer('resumes').notNullable().defaultTo(0);
        t.bigInteger('due_at').notNullable();
        t.bigInteger('created_at').notNullable();
        t.bigInteger('started_at').nullable();
        t.bigInteger('ended_at').nullable();
        t.bigInteger('updated_at').notNullable();
        t.integer('sessions').nullable();
        t.integer('facets').nullable();
        t.integer('learnings').nullable();
        t.integer('skills').nullable();
        t.integer('llm_calls').nullable();
        t.bigInteger('input_tokens').nullable();
        t.bigInteger('output_tokens').nullable();
        t.bigInteger('charged').nullable();
        t.text('produced').nullable();
        t.string('error_code', 40).nullable();
        t.text('error_message').nullable();
        t.index(['wallet', 'created_at']);
        t.index(['status', 'due_at']);
      });
      // One run at a time per wallet, whichever replica or trigger starts it (same SQL on both).
      await db.raw(
        "create unique index reflect_runs_one_active on reflect_runs (wallet) where status in ('queued', 'running', 'waiting_for_unlock')",
      );
    },
    async down(db) {
      for (const table of ['reflect_runs', 'reflect_schedules', 'wallet_settings'])
        await db.schema.dropTableIfExists(table);
    },
  },
  reflectMemoryMigration,
  reflectMemorySealingMigration,
  retryClaimerMigration('0300-ledger-transfer-claimer', 'ledger_transfers'),
  {
    name: '0310-provider-vault',
    async up(db) {
      // Each wallet's sealed provider keys (runtime/vault/store.ts): under the HMAC lookup of its
      // address, the JSON of its entries (AES-256-GCM under keys derived from the wallet's signature),
      // null once all are deleted; the version grows with every change (the row stays).
      await db.schema.createTable('provider_vaults', (t) => {
        t.string('lookup', 64).primary();
        t.text('sealed').nullable();
        t.bigInteger('version').notNullable();
        t.bigInteger('updated_at').notNullable();
      });
      // The vault's server key (the HMAC key of the lookups): an id that tells which key named the
      // rows, where it comes from, and the key itself only when no TEE backend gives a stable one.
      await db.schema.createTable('provider_vault_server_key', (t) => {
        t.string('id', 16).primary();
        t.string('key_id', 16).notNullable();
        t.string('source', 32).notNullable();
        t.text('material').nullable();
        t.bigInteger('updated_at').notNullable();
      });
      // Which replica holds which session's vault unlocked, until when (the session JWT's expiry): no
      // key, only what a refusal's hint and another replica's lock need.
      await db.schema.createTable('vault_unlocks', (t) => {
        t.string('session_id', 64).notNullable();
        t.string('replica_id', 36).notNullable();
        t.string('lookup', 64).notNullable().index();
        t.bigInteger('until').notNullable();
        t.primary(['session_id', 'replica_id']);
      });
    },
    async down(db) {
      for (const table of ['vault_unlocks', 'provider_vault_server_key', 'provider_vaults'])
        await db.schema.dropTableIfExists(table);
    },
  },
  {
    name: '0320-chat-session-answering',
    async up(db) {
      // Which request answers the session now, so that replicas answer one at a time: the replica
      // (replicas.id), the claim (a random id per request, the fence of its writes) and until when
      // (database time, ms), renewed while the answer runs. Null when none; a claim whose replica is
      // dead or whose time has passed is free.
      await db.schema.alterTable('chat_sessions', (t) => {
        t.string('answering_by', 36).nullable();
        t.string('answering_claim', 36).nullable();
        t.bigInteger('answering_until').nullable();
      });
    },
    async down(db) {
      await db.schema.alterTable('chat_sessions', (t) => {
        t.dropColumn('answering_until');
        t.dropColumn('answering_claim');
        t.dropColumn('answering_by');
      });
    },
  },
  {
    name: '0330-canvas-run-owner',
    async up(db) {
      // Which replica executes the run, so that one does: the replica (replicas.id), the claim (a random
      // id per taking, the fence of the run's writes) and until when (database time, ms), renewed while
      // it runs. A run whose replica is dead or whose time has passed is free to take over.
      // cancel_requested: a cancellation asked of any replica (its reason), which the owner carries out.
      await db.schema.alterTable('canvas_runs', (t) => {
        t.string('owner_replica', 36).nullable().index();
        t.string('owner_claim', 36).nullable();
        t.bigInteger('owner_until').nullable();
        t.string('cancel_requested', 40).nullable();
      });
    },
    async down(db) {
      await db.schema.alterTable('canvas_runs', (t) => {
        t.dropColumn('cancel_requested');
        t.dropColumn('owner_until');
        t.dropColumn('owner_claim');
        t.dropIndex(['owner_replica']);
        t.dropColumn('owner_replica');
      });
    },
  },
  {
    name: '0340-ledger-transfer-signed-transaction',
    async up(db) {
      // The operator's transaction for the transfer (its transfer, or its cancellation once
      // cancelling), signed and recorded before it is sent: sent again as it is after a crash or a
      // lost answer, never a new one while it can still be mined. Its nonce tells when it no longer
      // can (the account's count went past it).
      await db.schema.alterTable('ledger_transfers', (t) => {
        t.text('signed_tx').nullable();
        t.bigInteger('signed_nonce').nullable();
      });
    },
    async down(db) {
      await db.schema.alterTable('ledger_transfers', (t) => {
        t.dropColumn('signed_nonce');
        t.dropColumn('signed_tx');
      });
    },
  },
  {
    name: '0350-chat-answer-events',
    async up(db) {
      // Each attempt at answering a message (id: its claim on the session) and where its stream's
      // event numbers start (after those of the message's earlier attempts, so an event id names one
      // attempt); the replica answering it; followed_until (database time) while a resumed stream
      // follows it after its client went. Recorded with its first write of events.
      await db.schema.createTable('chat_answers', (t) => {
        t.string('id', 36).primary();
        t.string('session_id', 36).notNullable().references('chat_sessions.id').onDelete('CASCADE');
        t.string('message_id', 100).notNullable();
        t.string('replica', 36).notNullable();
        t.bigInteger('first_seq').notNullable();
        t.bigInteger('created_at').notNullable();
        t.bigInteger('followed_until').nullable();
        t.index(['session_id', 'message_id', 'first_seq']);
        t.index(['created_at']);
      });
      // An answer's stream events first_seq..last_seq as stored in one write: a JSON array of
      // [seq, event, data], sealed under the session's data key when sealed (bound to the answer and
      // first_seq). ended_at (kernel clock) on its last write: the answer's end. A resume buffer,
      // deleted with the session and streamRetentionSeconds after the end.
      await db.schema.createTable('chat_answer_events', (t) => {
        t.string('answer_id', 36).notNullable().references('chat_answers.id').onDelete('CASCADE');
        t.bigInteger('first_seq').notNullable();
        t.bigInteger('last_seq').notNullable();
        t.boolean('sealed').notNullable();
        t.text('events').notNullable();
        t.bigInteger('ended_at').nullable();
        t.primary(['answer_id', 'first_seq']);
        t.index(['ended_at']);
      });
    },
    async down(db) {
      for (const table of ['chat_answer_events', 'chat_answers']) await db.schema.dropTableIfExists(table);
    },
  },
];
