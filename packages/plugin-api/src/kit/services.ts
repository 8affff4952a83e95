import type { knex as Knex } from 'knex';
import { SigilError } from '../errors.ts';
import type { Clock, CoreServices, Database, PluginLogger, SecretRegistry } from '../services.ts';
import { KitLeases } from './leases.ts';
import { EvidenceRedactor } from './redact.ts';

/**
 * The core services a plugin under test may declare as dependencies, made by the kit so that a plugin's
 * own test suite needs nothing of Sigil's core. A caller may pass its own of any of them; the database,
 * when not passed, is an empty in-memory SQLite opened on first use, and only if knex and sqlite3 (the
 * package's optional peer dependencies) are installed; leases are kept in the process (KitLeases).
 */

/** A logger that writes nothing: kit results carry what a check saw, not the plugin's log lines. */
const silentLogger: PluginLogger = {
  fatal: () => undefined,
  error: () => undefined,
  warn: () => undefined,
  info: () => undefined,
  debug: () => undefined,
  trace: () => undefined,
  child: () => silentLogger,
};

const systemClock: Clock = { now: () => new Date() };

/**
 * The host scrubs a plugin's secrets from its log lines; the kit writes no log lines but records
 * evidence and reasons, so it scrubs them from those. A value stays redacted once added: evidence
 * recorded while it was secret must not show it later.
 */
class RedactingSecretRegistry implements SecretRegistry {
  constructor(private readonly redactor: EvidenceRedactor) {}

  add(value: string | undefined): void {
    if (value !== undefined) this.redactor.remember(value);
  }

  remove(): void {}
}

export class KitServices {
  /** What the checks of this run record is redacted with: the secrets the plugin adds included. */
  readonly redactor = new EvidenceRedactor();
  private readonly made: Omit<CoreServices, 'db'> = {
    logger: silentLogger,
    clock: systemClock,
    secrets: new RedactingSecretRegistry(this.redactor),
    fetch: globalThis.fetch,
    leases: new KitLeases(() => this.get('db')),
  };
  private scratchDatabase: Promise<Database> | undefined;

  /** `given` services are used as they are and left open: the caller owns them. */
  constructor(private readonly given: Partial<CoreServices> = {}) {}

  async get<Name extends keyof CoreServices>(name: Name): Promise<CoreServices[Name]> {
    const given = this.given[name];
    if (given !== undefined) return given;
    if (name !== 'db') return this.made[name as Exclude<Name, 'db'>] as CoreServices[Name];
    this.scratchDatabase ??= openScratchDatabase();
    return (await this.scratchDatabase) as CoreServices[Name];
  }

  /** Closes the database the kit opened, if it opened one. */
  async close(): Promise<void> {
    await (await this.scratchDatabase?.catch(() => undefined))?.destroy();
  }
}

/** An empty in-memory SQLite database: a plugin keeps its tables under its own prefix, as on the host. */
async function openScratchDatabase(): Promise<Database> {
  const [{ default: knex }] = await Promise.all([
    importPeer<{ default: typeof Knex }>('knex'),
    importPeer('sqlite3'),
  ]);
  const db = knex({
    client: 'sqlite3',
    connection: { filename: ':memory:' },
    useNullAsDefault: true,
    // One connection: each connection to `:memory:` would be a database of its own.
    pool: { min: 1, max: 1 },
  });
  await db.raw('select 1');
  return db;
}

/** Imports an optional peer dependency, or explains how to do without it. */
async function importPeer<Module>(name: string): Promise<Module> {
  try {
    return (await import(name)) as Module;
  } catch (err) {
    if ((err as { code?: unknown }).code !== 'ERR_MODULE_NOT_FOUND') throw err;
    throw new SigilError(
      'unavailable',
      `the plugin depends on coreServices.db, and the kit cannot open a database: "${name}" is not installed. ` +
        'Install knex and sqlite3 beside @sigil/plugin-api, or pass a database of your own ' +
        '(describePluginKit(plugin, options, { services: { db } })).',
      { cause: err },
    );
  }
}
