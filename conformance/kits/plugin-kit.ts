import { pino } from 'pino';
import { systemClock } from '../../core/clock.ts';
import { migrate, openDatabase, type Database } from '../../core/db/database.ts';
import { SecretRegistry } from '../../core/log.ts';
import type { CoreServices, PluginManifest } from '@sigil/plugin-api';
import { notApplicableBecause } from '../check.ts';
import { CONTRACT_KITS } from './index.ts';
import { contractChecks, type KitCheck } from './kit.ts';
import {
  instantiationBlocker,
  knownKind,
  manifestChecks,
  manifestOf,
  type PluginUnderTest,
  type UncheckedManifest,
} from './manifest.ts';
import { registerChecks, type RegisterOptions } from './mocha.ts';

/**
 * A whole plugin module under test: the generic manifest kit, then the contract kit of its kind run on
 * instances made by its own factory, the way the plugin host would make them.
 */

/** The core services a plugin may declare as dependencies, made for a kit run; the database only on demand. */
export class KitServices {
  private database: Promise<Database> | undefined;
  private readonly shared = {
    logger: pino({ level: 'silent' }),
    clock: systemClock,
    secrets: new SecretRegistry(),
    fetch: globalThis.fetch,
  };

  async get(name: keyof CoreServices): Promise<unknown> {
    if (name !== 'db') return this.shared[name];
    this.database ??= openDatabase({ url: ':memory:' }).then(async (db) => {
      await migrate(db);
      return db;
    });
    return this.database;
  }

  async close(): Promise<void> {
    await (await this.database)?.destroy();
  }
}

/** Parses the options, resolves declared core services, creates and starts one instance. */
async function createFromManifest(
  manifest: UncheckedManifest,
  options: Record<string, unknown>,
  services: KitServices,
): Promise<unknown> {
  // instantiationBlocker has vouched for the shape by the time this runs.
  const plugin = manifest as unknown as PluginManifest;
  const deps: Record<string, unknown> = {};
  // instantiationBlocker has also vouched that every dependency is a core service.
  for (const [name, ref] of Object.entries(plugin.dependencies ?? {}))
    if ('service' in ref) deps[name] = await services.get(ref.service);
  const instance = await plugin.create({
    config: plugin.config.parse(options),
    deps,
    logger: (await services.get('logger')) as CoreServices['logger'],
  });
  await instance.start?.();
  return instance;
}

/** Every check of the generic kit and of the plugin's kind, in the order they run. */
export function pluginKitChecks(subject: PluginUnderTest, services: KitServices): KitCheck[] {
  const manifest = manifestOf(subject.exports);
  const kind = manifest && knownKind(manifest);
  if (!manifest || !kind) return manifestChecks(subject);
  const load = () => createFromManifest(manifest, subject.options, services);
  const contract = contractChecks(CONTRACT_KITS[kind], load, String(manifest.specVersion));
  return [
    ...manifestChecks(subject),
    ...contract.map((check) => ({
      ...check,
      check: async (context: Parameters<KitCheck['check']>[0]) => {
        const blocker = instantiationBlocker(subject);
        if (blocker !== undefined) notApplicableBecause(`no instance to check: ${blocker}`);
        return check.check(context);
      },
    })),
  ];
}

/** Display name of a plugin module: its manifest name when it has one. */
export function pluginName(exports: unknown): string {
  const name = manifestOf(exports)?.name;
  return typeof name === 'string' ? name : '(no manifest)';
}

/**
 * For plugin authors' mocha suites: every check a plugin module must pass, e.g.
 * `import * as myPlugin from '../src/index.ts'` then `describePluginKit(myPlugin, { region: 'eu' })`.
 */
export function describePluginKit(
  exports: unknown,
  options: Record<string, unknown> = {},
  registration: RegisterOptions = {},
): void {
  describe(`plugin kit: ${pluginName(exports)}`, () => {
    const services = new KitServices();
    after(() => services.close());
    registerChecks(pluginKitChecks({ exports, options }, services), registration);
  });
}
