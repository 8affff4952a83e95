import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import knex from 'knex';
import { pino, type DestinationStream } from 'pino';
import { systemClock, type Clock } from '../../core/clock.ts';
import { configSchema, type SigilConfigInput } from '../../services/config.ts';
import { SecretRegistry, type Logger } from '../../core/log.ts';
import type { CoreServices } from '@sigil/plugin-api';
import type { PluginEntry } from '../../core/config/schema.ts';
import { isPostgresUrl, migrate, openDatabase, type Database } from '../../core/db/database.ts';
import { DatabaseLeases } from '../../core/db/leases.ts';
import { Replica, type ReplicaSettings } from '../../core/db/replicas.ts';
import { openKernel, type Kernel } from '../../services/kernel.ts';

export interface TestDatabase {
  /** `sqlite` or `postgres`: shown in test titles. */
  name: string;
  /** Returns a fresh, empty database URL (and a PostgreSQL schema) for one kernel. */
  fresh(): { url: string; schema?: string; cleanup(): Promise<void> };
}

const sqlite: TestDatabase = {
  name: 'sqlite',
  fresh() {
    const dir = mkdtempSync(join(tmpdir(), 'sigil-test-'));
    return { url: join(dir, 'sigil.db'), cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
  },
};

async function dropSchema(url: string, schema: string): Promise<void> {
  const admin = knex({ client: 'pg', connection: url, pool: { min: 0, max: 1 } });
  try {
    await admin.raw(`drop schema if exists "${schema}" cascade`);
  } finally {
    await admin.destroy();
  }
}

/** A PostgreSQL database at `url`, each `fresh()` a new schema in it (dropped by its cleanup). */
export function postgresTestDatabase(url: string): TestDatabase {
  return {
    name: 'postgres',
    fresh() {
      const schema = `t_${process.pid}_${randomBytes(4).toString('hex')}`;
      return { url, schema, cleanup: () => dropSchema(url, schema) };
    },
  };
}

/** SQLite always; PostgreSQL too when TEST_DATABASE_URL is set (CI sets it). */
export const TEST_DATABASES: readonly TestDatabase[] = [
  sqlite,
  ...(process.env.TEST_DATABASE_URL ? [postgresTestDatabase(process.env.TEST_DATABASE_URL)] : []),
];

/** A test database that hands out the same database every time, so a kernel can be reopened on it. */
export function stickyDatabase(database: TestDatabase): { database: TestDatabase; drop(): Promise<void> } {
  const fresh = database.fresh();
  return {
    database: { name: database.name, fresh: () => ({ ...fresh, cleanup: async () => undefined }) },
    drop: fresh.cleanup,
  };
}

/** A copy of a test database, which another kernel can open; `drop` removes it. */
export interface Snapshot {
  database: TestDatabase;
  drop(): Promise<void>;
}

/**
 * A copy of what `db`, a kernel's database on the sticky `source`, holds committed at this instant,
 * as a database another kernel can open: what a process that crashed now would leave (its writes
 * not yet committed, and all later ones, are not in it). SQLite: VACUUM INTO a new file; PostgreSQL:
 * every table copied into a new schema in one REPEATABLE READ transaction, so from one snapshot
 * (serial columns draw on the source's sequences: drop the copy before the source).
 */
export async function snapshotDatabase(db: Database, source: TestDatabase): Promise<Snapshot> {
  const { url, schema } = source.fresh();
  let copy: { url: string; schema?: string; cleanup(): Promise<void> };
  if (schema === undefined) {
    const dir = mkdtempSync(join(tmpdir(), 'sigil-snapshot-'));
    const file = join(dir, 'sigil.db');
    await db.raw('vacuum into ?', [file]);
    copy = { url: file, cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
  } else {
    const target = `${schema}_copy_${randomBytes(2).toString('hex')}`;
    await db.transaction(
      async (trx) => {
        const tables = (await trx.raw('select tablename from pg_tables where schemaname = ?', [schema]))
          .rows as { tablename: string }[];
        await trx.raw(`create schema "${target}"`);
        for (const { tablename } of tables) {
          await trx.raw(
            `create table "${target}"."${tablename}" (like "${schema}"."${tablename}" including all)`,
          );
          await trx.raw(`insert into "${target}"."${tablename}" select * from "${schema}"."${tablename}"`);
        }
      },
      { isolationLevel: 'repeatable read' },
    );
    copy = { url, schema: target, cleanup: () => dropSchema(url, target) };
  }
  return {
    database: { name: source.name, fresh: () => ({ ...copy, cleanup: async () => undefined }) },
    drop: copy.cleanup,
  };
}

/** Replicas sharing the database (as on PostgreSQL), with the default heartbeat and bound. */
export const SHARED_REPLICAS: ReplicaSettings = { heartbeatMs: 10_000, deadAfterMs: 30_000, shared: true };

/** Two processes' view of one database: a handle each, and the replicas registered through them. */
export interface TwoHandles {
  handles: [Database, Database];
  /** Registers a replica on `db` (shared by default); `close` unregisters it. */
  register(db: Database, settings?: ReplicaSettings): Promise<Replica>;
  /** Unregisters the replicas, closes both handles and drops the database. */
  close(): Promise<void>;
}

/** A fresh database with the kernel's tables, opened twice, as two replicas have it. */
export async function openTwoHandles(database: TestDatabase): Promise<TwoHandles> {
  const fresh = database.fresh();
  const open = () => openDatabase({ url: fresh.url, ...(fresh.schema ? { schema: fresh.schema } : {}) });
  const handles: [Database, Database] = [await open(), await open()];
  await migrate(handles[0]);
  const registered: Replica[] = [];
  return {
    handles,
    register: async (db, settings = SHARED_REPLICAS) => {
      const replica = await Replica.register(db, quietLogger(), settings);
      registered.push(replica);
      return replica;
    },
    close: async () => {
      for (const replica of registered) await replica.close();
      await Promise.all(handles.map((db) => db.destroy()));
      await fresh.cleanup();
    },
  };
}

/** Runs the same suite once per test database: `describeEachDatabase('ledger', (db) => { … })`. */
export function describeEachDatabase(title: string, body: (database: TestDatabase) => void): void {
  for (const database of TEST_DATABASES) describe(`${title} [${database.name}]`, () => body(database));
}

/** A logger that writes nowhere unless SIGIL_TEST_LOGS is set; tests that read logs pass their own. */
export const quietLogger = (): Logger => pino({ level: process.env.SIGIL_TEST_LOGS ? 'debug' : 'silent' });

/**
 * Sections to merge over the test defaults, as a config file writes them (the schema fills in the
 * defaults); arrays and scalars replace, objects merge one level deep.
 */
export type ConfigOverrides = {
  [K in keyof SigilConfigInput]?: SigilConfigInput[K] extends unknown[]
    ? SigilConfigInput[K]
    : Partial<SigilConfigInput[K]>;
};

/** The GATEWAY_SECRET_KEY of test kernels (a test may give another, or none: `secretKey: undefined`). */
export const TEST_GATEWAY_SECRET_KEY = 'test-gateway-secret-key-0123456789abcdef';

/** Public URLs the services are configured with; clients sign for these, then talk to the real port. */
export const GATEWAY_PUBLIC = 'http://gateway.sigil.test';
export const RUNTIME_PUBLIC = 'http://runtime.sigil.test';

/**
 * What replicas sharing the database must be given (services/shared-deployment.ts), which test
 * kernels on one (PostgreSQL, or `database.shared`) get unless the test gives its own, or none
 * (`publicUrl: undefined`, tee-none's `keyMaterial: undefined`); no delegation key beside tee-vtpm,
 * which seals one. One key for every test kernel in a run, so two on one database agree.
 */
export const TEST_SHARED_SETTINGS = {
  runtime: {
    publicUrl: RUNTIME_PUBLIC,
    mcpSigningKey: generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({
      type: 'pkcs8',
      format: 'pem',
    }) as string,
  },
  gateway: { publicUrl: GATEWAY_PUBLIC },
  teeKeyMaterial: 'test-tee-key-material-0123456789abcdef',
};

/** tee-none with the test key material, unless its options name `keyMaterial` (even as undefined). */
export const withTestKeyMaterial = (plugin: PluginEntry): PluginEntry =>
  plugin.resolve === 'tee-none' && !('keyMaterial' in plugin.options)
    ? { ...plugin, options: { ...plugin.options, keyMaterial: TEST_SHARED_SETTINGS.teeKeyMaterial } }
    : plugin;

export interface TestKernelOptions {
  database?: TestDatabase;
  config?: ConfigOverrides;
  clock?: Clock;
  logger?: Logger;
  /** Instead of a silent logger, the kernel's real one (with secret scrubbing, level debug) writing here. */
  logDestination?: DestinationStream;
  /** Where a config file would be: plugin packages and paths resolve from here (default: the cwd). */
  configDir?: string;
}

/** A real kernel (real database, real plugins) on a fresh database, closed and dropped by `close`. */
export async function openTestKernel(options: TestKernelOptions = {}): Promise<Kernel> {
  const database = (options.database ?? sqlite).fresh();
  // No warmup: tests that want MCP servers install their own from a local registry. One secret key
  // for every test gateway: a gateway whose replicas share the database (PostgreSQL) needs one, and
  // two test gateways on one database must agree on it.
  const shared = options.config?.database?.shared ?? isPostgresUrl(database.url);
  // tee-vtpm seals the delegation key: a configured one would override it.
  const sealing = options.config?.plugins?.some((plugin) => plugin?.resolve === 'tee-vtpm') ?? false;
  const raw: Record<string, unknown> = {
    database: { url: database.url },
    log: { level: options.logDestination ? 'debug' : 'silent' },
    gateway: {
      warmupAtStart: false,
      secretKey: TEST_GATEWAY_SECRET_KEY,
      ...(shared ? TEST_SHARED_SETTINGS.gateway : {}),
    },
    ...(shared
      ? {
          runtime: sealing
            ? { publicUrl: TEST_SHARED_SETTINGS.runtime.publicUrl }
            : TEST_SHARED_SETTINGS.runtime,
        }
      : {}),
  };
  for (const [section, values] of Object.entries(options.config ?? {}) as [string, unknown][]) {
    const isObject = typeof values === 'object' && values !== null && !Array.isArray(values);
    raw[section] = isObject ? { ...(raw[section] as object | undefined), ...values } : values;
  }
  const parsed = configSchema.parse(raw);
  const config = shared ? { ...parsed, plugins: parsed.plugins.map(withTestKeyMaterial) } : parsed;
  const kernel = await openKernel({
    loaded: {
      config,
      file: options.configDir === undefined ? undefined : join(options.configDir, 'sigil.config.json'),
      envOverrides: [],
    },
    ...(options.logDestination
      ? { logDestination: options.logDestination }
      : { logger: options.logger ?? quietLogger() }),
    ...(options.clock ? { clock: options.clock } : {}),
    ...(database.schema ? { dbSchema: database.schema } : {}),
  });
  return {
    ...kernel,
    close: async () => {
      await kernel.close();
      await database.cleanup();
    },
  };
}

/** The core services a plugin host gets, on `db`, with a silent logger and the system clock. */
export const testCoreServices = (db: Database): CoreServices => ({
  db,
  logger: quietLogger(),
  clock: systemClock,
  secrets: new SecretRegistry(),
  fetch: globalThis.fetch,
  leases: new DatabaseLeases(db),
});
