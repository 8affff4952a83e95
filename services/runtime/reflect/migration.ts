import type { Migration } from '../../../core/db/migrations/index.ts';

/** Self-improvement's memory (memory.ts): facets, learnings, skills and how far each session was read. */
export const reflectMemoryMigration: Migration = {
  name: '0280-reflect-memory',
  async up(db) {
    // How far a pipeline version has read each session (the last message seq it extracted).
    await db.schema.createTable('reflect_watermarks', (t) => {
      t.string('session_id', 36).notNullable();
      t.integer('pipeline_version').notNullable();
      t.string('wallet', 42).notNullable();
      t.integer('last_seq').notNullable();
      t.string('run_id', 36).notNullable();
      t.bigInteger('processed_at').notNullable();
      t.primary(['session_id', 'pipeline_version']);
      t.index(['wallet', 'pipeline_version']);
    });
    await db.schema.createTable('reflect_facets', (t) => {
      t.string('id', 36).primary();
      t.string('wallet', 42).notNullable();
      t.string('run_id', 36).notNullable();
      t.string('session_id', 36).notNullable();
      t.string('agent_id', 36).notNullable();
      t.string('kind', 24).notNullable();
      t.text('statement').notNullable();
      t.text('message_ids').notNullable();
      // Its place in its session's extraction: facets are read back in the order they were told.
      t.integer('position').notNullable();
      // The run that synthesized it into learnings; null while pending.
      t.string('synthesized_run_id', 36).nullable();
      t.bigInteger('created_at').notNullable();
      t.index(['wallet', 'synthesized_run_id']);
      t.index(['wallet', 'session_id']);
    });
    await db.schema.createTable('reflect_learnings', (t) => {
      t.string('id', 36).primary();
      t.string('wallet', 42).notNullable();
      t.text('statement').notNullable();
      // A digest of the normalized statement (keyed when sealed): finds a twin without decrypting.
      t.string('normalized_hash', 64).notNullable();
      t.double('confidence').notNullable();
      t.string('status', 16).notNullable();
      t.string('superseded_by', 36).nullable();
      t.text('sources').notNullable();
      t.string('run_id', 36).nullable();
      t.bigInteger('created_at').notNullable();
      t.bigInteger('updated_at').notNullable();
      t.bigInteger('edited_at').nullable();
      t.index(['wallet', 'status', 'normalized_hash']);
    });
    // One row per version of a skill.
    await db.schema.createTable('reflect_skills', (t) => {
      t.string('id', 36).primary();
      t.string('wallet', 42).notNullable();
      t.string('name', 64).notNullable();
      t.integer('version').notNullable();
      t.text('description').notNullable();
      t.text('instructions').notNullable();
      t.text('tools').notNullable();
      t.text('sources').notNullable();
      t.string('run_id', 36).notNullable();
      t.boolean('deleted').notNullable().defaultTo(false);
      t.bigInteger('created_at').notNullable();
      t.unique(['wallet', 'name', 'version']);
    });
  },
  async down(db) {
    for (const table of ['reflect_skills', 'reflect_learnings', 'reflect_facets', 'reflect_watermarks'])
      await db.schema.dropTableIfExists(table);
  },
};

/**
 * The memory sealed at rest (memory-sealer.ts): each wallet's memory data key, wrapped under the
 * history's key-encryption key, and on every row holding the user's words whether they are sealed.
 */
export const reflectMemorySealingMigration: Migration = {
  name: '0290-reflect-memory-sealing',
  async up(db) {
    // One data key per wallet, as chat_sessions keeps a session's: the key-encryption key's id and
    // the data key wrapped under it (AES-256-GCM). Rotation rewraps this row, never the memory.
    await db.schema.createTable('reflect_keys', (t) => {
      t.string('wallet', 42).primary();
      t.string('key_id', 64).notNullable();
      t.text('wrapped_key').notNullable();
      t.bigInteger('created_at').notNullable();
    });
    // Rows written before a key was configured stay plain text (false) until `sigil db rewrap-history`.
    for (const table of ['reflect_facets', 'reflect_learnings', 'reflect_skills'])
      await db.schema.alterTable(table, (t) => {
        t.boolean('sealed').notNullable().defaultTo(false);
      });
  },
  async down(db) {
    for (const table of ['reflect_facets', 'reflect_learnings', 'reflect_skills'])
      await db.schema.alterTable(table, (t) => {
        t.dropColumn('sealed');
      });
    await db.schema.dropTableIfExists('reflect_keys');
  },
};
