import type { CoreServices, PluginInstanceOf, PluginKind, PluginManifest, SpecVersion } from '../index.ts';
import { notApplicableBecause } from './check.ts';
import { CONTRACT_KITS, latestKit } from './contract-kits.ts';
import { contractChecks, type ContractKit, type KitCheck } from './kit.ts';
import {
  instantiationBlocker,
  knownKind,
  manifestChecks,
  manifestOf,
  type PluginUnderTest,
  type UncheckedManifest,
} from './manifest.ts';
import { registerChecks, type RegisterOptions } from './mocha.ts';
import { KitServices } from './services.ts';

/**
 * A whole plugin module under test: the generic manifest kit, then the contract kit of its kind run on
 * instances made by its own factory, the way the plugin host would make them.
 */

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
    logger: await services.get('logger'),
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
  // The manifest kit refuses a version the kind does not have; its contract is then the newest one's.
  const kits = CONTRACT_KITS[kind] as Readonly<Record<string, ContractKit<typeof kind>>>;
  const contract = contractChecks(kits[String(manifest.specVersion)] ?? latestKit(kind), load);
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

export interface PluginKitOptions extends RegisterOptions {
  /** Core services to give the plugin instead of the kit's own (e.g. `db`); the caller closes them. */
  services?: Partial<CoreServices>;
}

/**
 * For plugin authors' mocha suites: every check a plugin module must pass, e.g.
 * `import * as myPlugin from '../src/index.ts'` then `describePluginKit(myPlugin, { region: 'eu' })`.
 */
export function describePluginKit(
  exports: unknown,
  options: Record<string, unknown> = {},
  { services: given, ...registration }: PluginKitOptions = {},
): void {
  describe(`plugin kit: ${pluginName(exports)}`, () => {
    const services = new KitServices(given);
    after(() => services.close());
    registerChecks(pluginKitChecks({ exports, options }, services), {
      ...registration,
      redactor: services.redactor,
    });
  });
}

/**
 * A `load` for the describe…Behaviour kits: each call makes and starts a fresh instance of the plugin
 * whose manifest is given, as the host makes it, with the kit's core services (or those given). Call
 * it inside a mocha `describe`: the services close after it. `options` may be a function, called for
 * each instance: for options only known once a `before` hook has run (a fixture's address or digests),
 * or a fresh cache per instance.
 */
export function pluginLoader<K extends PluginKind, V extends SpecVersion<K> = SpecVersion<K>>(
  manifest: { kind: K; specVersion: V },
  options: Record<string, unknown> | (() => Record<string, unknown>) = {},
  given: Partial<CoreServices> = {},
): () => Promise<PluginInstanceOf<K, V>> {
  const services = new KitServices(given);
  after(() => services.close());
  const optionsNow = typeof options === 'function' ? options : () => options;
  return async () =>
    (await createFromManifest(manifest as UncheckedManifest, optionsNow(), services)) as PluginInstanceOf<
      K,
      V
    >;
}
