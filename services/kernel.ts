import { dirname } from 'node:path';
import { systemClock, type Clock } from '../core/clock.ts';
import { loadConfig, type LoadedConfig, type SigilConfig } from './config.ts';
import { isPostgresUrl, migrate, openDatabase, type Database } from '../core/db/database.ts';
import type { JobLeases } from '../core/db/leased-pass.ts';
import { DatabaseLeases } from '../core/db/leases.ts';
import { Replica } from '../core/db/replicas.ts';
import type { DestinationStream } from 'pino';
import { createLogger, logDestination, SecretRegistry, type Logger } from '../core/log.ts';
import { PluginHost } from '../core/plugins/host.ts';
import { builtinPlugins } from './builtin-plugins.ts';
import { serviceMigrations } from './migrations.ts';

/** What every service is composed from: the loaded config, the database, plugins and core services. */
export interface Kernel {
  config: SigilConfig;
  configFile: string | undefined;
  db: Database;
  logger: Logger;
  clock: Clock;
  secrets: SecretRegistry;
  plugins: PluginHost;
  /** This process as a replica on the database: its id, its heartbeat, and who else is alive. */
  replica: Replica;
  /** Leases on the database, shared by every replica (plugins get them as `coreServices.leases`). */
  leases: DatabaseLeases;
  /** Stops plugins (reverse order), unregisters the replica and closes the database. */
  close(): Promise<void>;
}

/** The leases this replica's jobs take (`database.leaseSeconds` unrenewed): one replica at a time runs each. */
export function jobLeases(kernel: Kernel): JobLeases {
  return {
    leases: kernel.leases,
    holder: kernel.replica.id,
    leaseMs: kernel.config.database.leaseSeconds * 1000,
  };
}

export interface KernelOptions {
  configPath?: string;
  env?: NodeJS.ProcessEnv;
  clock?: Clock;
  logger?: Logger;
  /** Where the kernel's own logger writes (tests read it to prove secrets never reach logs). */
  logDestination?: DestinationStream;
  /** Use this config instead of loading one (tests). */
  loaded?: LoadedConfig;
  /** PostgreSQL schema (tests isolate themselves with one). */
  dbSchema?: string;
}

/** Loads config, opens and migrates the database, and loads and starts plugins. Fails before serving anything. */
export async function openKernel(options: KernelOptions = {}): Promise<Kernel> {
  const loaded =
    options.loaded ??
    loadConfig({
      ...(options.configPath ? { path: options.configPath } : {}),
      env: options.env ?? process.env,
    });
  const { config } = loaded;
  const secrets = new SecretRegistry();
  for (const value of [
    config.database.dataKey,
    config.auth.jwtSigningKey,
    config.runtime.mcpSigningKey,
    config.runtime.providerApiKey,
    config.gateway.secretKey,
  ]) {
    secrets.add(value);
  }
  const { logger, closeLog } = kernelLogger(options, config, secrets);
  const clock = options.clock ?? systemClock;
  const db = await openDatabase({
    url: config.database.url,
    ...(options.dbSchema ? { schema: options.dbSchema } : {}),
  });
  let replica: Replica | undefined;
  try {
    const applied = await migrate(db, serviceMigrations);
    if (applied.length > 0) logger.info({ applied }, 'database migrated');
    replica = await Replica.register(db, logger, {
      heartbeatMs: config.database.heartbeatSeconds * 1000,
      deadAfterMs: config.database.replicaDeadAfterSeconds * 1000,
      shared: config.database.shared ?? isPostgresUrl(config.database.url),
    });
    const leases = new DatabaseLeases(db, replica);
    const plugins = new PluginHost({
      builtins: builtinPlugins,
      core: { db, logger, clock, secrets, fetch: globalThis.fetch, leases },
      logger,
      baseDir: loaded.file ? dirname(loaded.file) : process.cwd(),
    });
    await plugins.load(config.plugins);
    await plugins.start();
    const registered = replica;
    return {
      config,
      configFile: loaded.file,
      db,
      logger,
      clock,
      secrets,
      plugins,
      replica: registered,
      leases,
      close: async () => {
        await plugins.stop();
        await registered.close();
        await db.destroy();
        closeLog();
      },
    };
  } catch (err) {
    // The failure to report is the first one: closing after it only tidies up.
    await replica?.close().catch(() => undefined);
    await db.destroy();
    closeLog();
    throw err;
  }
}

/**
 * The kernel's logger: the one it was given, or one writing to the given destination, or to stderr
 * (stdout stays clean for what commands print: URLs, JSON). The kernel closes only a destination it
 * made; one it was given belongs to the caller.
 */
function kernelLogger(
  options: KernelOptions,
  config: SigilConfig,
  secrets: SecretRegistry,
): { logger: Logger; closeLog(): void } {
  if (options.logger) return { logger: options.logger, closeLog: () => undefined };
  const logTo = (destination: DestinationStream) =>
    createLogger({ level: config.log.level, secrets, destination });
  if (options.logDestination) return { logger: logTo(options.logDestination), closeLog: () => undefined };
  const made = logDestination(2);
  return { logger: logTo(made), closeLog: () => made.close() };
}
