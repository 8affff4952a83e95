import { createRequire } from 'node:module';
import { isAbsolute, join, resolve as resolvePath } from 'node:path';
import { pathToFileURL } from 'node:url';
// awilix's entry without loadModules/listModules (its "browser" build, the same container otherwise):
// the Node entry imports fast-glob and four more packages for them, ~40 ms of every start (issue 30),
// and plugins are named in the config, never found by globbing.
import { asValue, createContainer, type AwilixContainer } from 'awilix/browser';
import {
  CORE_SERVICE_NAMES,
  dependencyRefProblem,
  type CoreServices,
  type CurrentInstanceOf,
  type ExtensionPoint,
  PLUGIN_KINDS,
  type PluginKind,
  type PluginLifecycle,
  type PluginManifest,
  providedExtensionProblems,
  SigilError,
  SUPPORTED_SPEC_VERSIONS,
} from '@sigil/plugin-api';
import type { Logger } from '../log.ts';
import { currentContract } from './adapters.ts';
import { PARSED_ONCE } from '../config/load.ts';
import type { PluginEntry } from '../config/schema.ts';

export type PluginState = 'loaded' | 'starting' | 'started' | 'stopping' | 'stopped' | 'failed';

export interface PluginStatus {
  name: string;
  kind: PluginKind;
  specVersion: string;
  /** Where it came from: `builtin:<name>`, a package name, or a path. */
  source: string;
  state: PluginState;
}

/** One reason a plugin cannot be used: the plugin, the config path at fault, and why. */
export interface PluginProblem {
  plugin: string;
  configPath: string;
  reason: string;
}

/**
 * A start-up failure listing every problem the host found: all plugins are checked (module, manifest,
 * options, names, dependencies) before any is created, so an operator fixes a config in one pass.
 */
export class PluginLoadError extends SigilError {
  readonly problems: readonly PluginProblem[];
  constructor(problems: readonly PluginProblem[]) {
    const lines = problems.map((p) => `plugin "${p.plugin}" (${p.configPath}): ${p.reason}`);
    super(
      'plugin_invalid',
      lines.length === 1 ? (lines[0] as string) : `${lines.length} plugin problems:\n${lines.join('\n')}`,
      {
        details: { problems },
      },
    );
    this.problems = problems;
  }
}

/** Built-in plugins by name, imported lazily so unused ones cost nothing at start-up. */
export type BuiltinPlugins = Readonly<Record<string, () => Promise<unknown>>>;

interface LoadedPlugin {
  manifest: PluginManifest;
  name: string;
  configPath: string;
  source: string;
  options: unknown;
  /** Container registrations of its dependencies by the names its factory reads them under. */
  dependencies: Map<string, string>;
  instance?: PluginLifecycle;
  /** The instance as its kind's current contract: itself, or an adapter of an older spec version. */
  contract?: unknown;
  state: PluginState;
}

export interface PluginHostOptions {
  builtins: BuiltinPlugins;
  core: CoreServices;
  logger: Logger;
  /** Directory that relative plugin paths and package names resolve from (the config file's). */
  baseDir: string;
}

/** Plugins are registered beside the core services under this prefix, so no plugin name can shadow one. */
const registrationOf = (pluginName: string): string => `plugin:${pluginName}`;

/** Collects problems while the host checks plugins; a check that cannot go on returns undefined. */
class Problems {
  readonly found: PluginProblem[] = [];
  add(plugin: string, configPath: string, reason: string): undefined {
    this.found.push({ plugin, configPath, reason });
    return undefined;
  }
}

/**
 * Loads plugins named in the config, checks them, creates them in dependency order through an Awilix
 * container, and runs their lifecycle. Every problem found before creation is reported at once, in one
 * PluginLoadError raised before anything is created.
 */
export class PluginHost {
  private readonly container: AwilixContainer;
  private readonly plugins: LoadedPlugin[] = [];
  private readonly options: PluginHostOptions;

  constructor(options: PluginHostOptions) {
    this.options = options;
    this.container = createContainer({ strict: true });
    for (const [name, service] of Object.entries(options.core))
      this.container.register(name, asValue(service));
  }

  /** Resolves, validates and creates every enabled plugin. Nothing is started yet. */
  async load(entries: readonly PluginEntry[]): Promise<void> {
    const problems = new Problems();
    const candidates: LoadedPlugin[] = [];
    for (const [index, entry] of entries.entries()) {
      if (!entry.enabled) continue;
      const plugin = await this.inspect(entry, `plugins.${index}`, problems);
      if (plugin) candidates.push(plugin);
    }
    const unique = uniqueNames(candidates, problems);
    refuseSharedExtensionKeys(unique, problems);
    for (const plugin of unique) resolveDependencies(plugin, unique, problems);
    const ordered = dependencyOrder(unique, problems);
    if (problems.found.length > 0) throw new PluginLoadError(problems.found);
    for (const plugin of ordered) {
      const deps: Record<string, unknown> = {};
      for (const [name, registration] of plugin.dependencies)
        deps[name] = this.container.resolve(registration);
      try {
        plugin.instance = await plugin.manifest.create({
          config: plugin.options,
          deps,
          logger: this.options.logger.child({ plugin: plugin.name }),
        });
      } catch (cause) {
        throw new PluginLoadError([
          {
            plugin: plugin.name,
            configPath: plugin.configPath,
            reason: `factory failed: ${(cause as Error).message}`,
          },
        ]);
      }
      plugin.contract = currentContract(
        plugin.manifest.kind,
        plugin.manifest.specVersion,
        plugin.instance,
        plugin.name,
      );
      this.container.register(registrationOf(plugin.name), asValue(plugin.contract));
      this.plugins.push(plugin);
    }
  }

  /** Starts plugins in load order; when one fails, stops those already started and throws. */
  async start(): Promise<void> {
    for (const plugin of this.plugins) {
      plugin.state = 'starting';
      try {
        await plugin.instance?.start?.();
        plugin.state = 'started';
      } catch (cause) {
        plugin.state = 'failed';
        // Nothing keeps running after a failed start: the caller gets no host to stop.
        await this.stop();
        throw new PluginLoadError([
          {
            plugin: plugin.name,
            configPath: plugin.configPath,
            reason: `start failed: ${(cause as Error).message}`,
          },
        ]);
      }
    }
  }

  /** Stops started plugins in reverse order; one failing stop does not keep the others running. */
  async stop(): Promise<void> {
    for (const plugin of [...this.plugins].reverse()) {
      if (plugin.state !== 'started' && plugin.state !== 'failed') continue;
      plugin.state = 'stopping';
      try {
        await plugin.instance?.stop?.();
        plugin.state = 'stopped';
      } catch (cause) {
        plugin.state = 'failed';
        this.options.logger.error({ plugin: plugin.name, err: cause }, 'plugin stop failed');
      }
    }
  }

  list(): PluginStatus[] {
    return this.plugins.map((p) => ({
      name: p.name,
      kind: p.manifest.kind,
      specVersion: p.manifest.specVersion,
      source: p.source,
      state: p.state,
    }));
  }

  /** All loaded instances of a kind, in load order, as the kind's current contract. */
  all<K extends PluginKind>(kind: K): CurrentInstanceOf<K>[] {
    return this.plugins
      .filter((p) => p.manifest.kind === kind)
      .map((p) => p.contract as CurrentInstanceOf<K>);
  }

  /** The instances that extend `point`, by the key each provides (no key is provided twice). */
  extensions<T, Key extends string>(point: ExtensionPoint<T, Key>): ReadonlyMap<Key, T> {
    const found = new Map<Key, T>();
    for (const plugin of this.plugins)
      for (const extension of plugin.manifest.provides ?? [])
        if (extension.point.id === point.id) found.set(extension.key as Key, plugin.contract as T);
    return found;
  }

  /** The one instance of a kind; a clear error when none or several are loaded. */
  one<K extends PluginKind>(kind: K): CurrentInstanceOf<K> {
    const found = this.all(kind);
    if (found.length !== 1) {
      throw new SigilError('config_invalid', `expected exactly one "${kind}" plugin, found ${found.length}`, {
        hint: `List one plugin of kind ${kind} under "plugins" in sigil.config.json`,
      });
    }
    return found[0] as CurrentInstanceOf<K>;
  }

  /** Imports the entry's module and checks its manifest and options, noting every problem found. */
  private async inspect(
    entry: PluginEntry,
    configPath: string,
    problems: Problems,
  ): Promise<LoadedPlugin | undefined> {
    const imported = await this.importModule(entry.resolve, configPath, problems);
    if (!imported) return undefined;
    const manifest = readManifest(imported.module, entry.resolve, configPath, problems);
    if (!manifest) return undefined;
    const name = entry.id ?? manifest.name;
    const namePath = entry.id === undefined ? `${configPath}.resolve` : `${configPath}.id`;
    // Every check below runs, so all of this plugin's problems are reported; any of them rules it out.
    const found = problems.found.length;
    if ((CORE_SERVICE_NAMES as readonly string[]).includes(name)) {
      problems.add(
        name,
        namePath,
        `"${name}" is the name of a core service (${CORE_SERVICE_NAMES.join(', ')}); give the plugin another "id"`,
      );
    }
    if (!(PLUGIN_KINDS as readonly string[]).includes(manifest.kind)) {
      return problems.add(
        name,
        configPath,
        `unknown kind "${manifest.kind}"; known kinds: ${PLUGIN_KINDS.join(', ')}`,
      );
    }
    const supported = SUPPORTED_SPEC_VERSIONS[manifest.kind] as readonly string[];
    if (!supported.includes(manifest.specVersion)) {
      problems.add(
        name,
        configPath,
        `specVersion "${manifest.specVersion}" of kind ${manifest.kind} is not supported by this core (supported: ${supported.join(', ')})`,
      );
    }
    for (const reason of providedExtensionProblems(manifest.kind, manifest.provides))
      problems.add(name, `${configPath}.resolve`, reason);
    const parsed = manifest.config.safeParse(entry.options, PARSED_ONCE);
    if (!parsed.success) {
      for (const issue of parsed.error.issues) {
        const path = [configPath, 'options', ...issue.path.map(String)].join('.');
        problems.add(name, path, `invalid config: ${issue.message}`);
      }
    }
    if (problems.found.length > found) return undefined;
    return {
      manifest,
      name,
      configPath,
      source: imported.source,
      options: parsed.data,
      dependencies: new Map(),
      state: 'loaded',
    };
  }

  private async importModule(
    specifier: string,
    configPath: string,
    problems: Problems,
  ): Promise<{ module: unknown; source: string } | undefined> {
    const builtin = this.options.builtins[specifier];
    if (builtin) return { module: await builtin(), source: `builtin:${specifier}` };
    const isPath = specifier.startsWith('.') || isAbsolute(specifier);
    try {
      if (isPath) {
        const file = resolvePath(this.options.baseDir, specifier);
        return { module: await import(pathToFileURL(file).href), source: file };
      }
      const require = createRequire(join(this.options.baseDir, 'package.json'));
      let url: string;
      try {
        url = pathToFileURL(require.resolve(specifier)).href;
      } catch {
        url = specifier; // ESM-only packages without a "require" condition resolve through import()
      }
      return { module: await import(url), source: specifier };
    } catch (cause) {
      const known = Object.keys(this.options.builtins).join(', ');
      return problems.add(
        specifier,
        `${configPath}.resolve`,
        `cannot load "${specifier}": ${(cause as Error).message.split('\n')[0]} (built-in plugins: ${known})`,
      );
    }
  }
}

/** Plugins with distinct names; a second plugin of a name is a problem (and left out). */
function uniqueNames(plugins: readonly LoadedPlugin[], problems: Problems): LoadedPlugin[] {
  const byName = new Map<string, LoadedPlugin>();
  for (const plugin of plugins) {
    const twin = byName.get(plugin.name);
    if (twin) {
      problems.add(
        plugin.name,
        `${plugin.configPath}.id`,
        `duplicate name: ${twin.configPath} already loads a plugin named "${plugin.name}"; give one of them a distinct "id"`,
      );
    } else byName.set(plugin.name, plugin);
  }
  return [...byName.values()];
}

/** A key of an extension point provided by two plugins is a problem of the second, naming both. */
function refuseSharedExtensionKeys(plugins: readonly LoadedPlugin[], problems: Problems): void {
  const providers = new Map<string, LoadedPlugin>();
  for (const plugin of plugins) {
    for (const { point, key } of plugin.manifest.provides ?? []) {
      const claim = `${point.id}\0${key}`;
      const first = providers.get(claim);
      if (!first) providers.set(claim, plugin);
      else if (first !== plugin)
        problems.add(
          plugin.name,
          plugin.configPath,
          `${point.keyName} "${key}" (extension point ${point.id}) is provided by both "${first.name}" (${first.configPath}) and "${plugin.name}" (${plugin.configPath}); enable only one of them`,
        );
    }
  }
}

/** Maps each declared dependency to a container registration: a core service, or the plugin it names. */
function resolveDependencies(
  plugin: LoadedPlugin,
  plugins: readonly LoadedPlugin[],
  problems: Problems,
): void {
  for (const [name, ref] of Object.entries(plugin.manifest.dependencies ?? {})) {
    const problem = (reason: string) =>
      problems.add(plugin.name, plugin.configPath, `dependency "${name}": ${reason}`);
    if ('service' in ref) {
      plugin.dependencies.set(name, ref.service);
      continue;
    }
    // A plugin never depends on itself: by kind, it means another plugin of its own kind.
    const ofKind = plugins.filter((p) => p !== plugin && p.manifest.kind === ref.kind);
    if (ref.name !== undefined) {
      const named = plugins.find((p) => p.name === ref.name);
      if (!named) problem(`no plugin named "${ref.name}" is loaded`);
      else if (named.manifest.kind !== ref.kind)
        problem(`"${ref.name}" is a ${named.manifest.kind} plugin, not a ${ref.kind}`);
      else plugin.dependencies.set(name, registrationOf(named.name));
    } else if (ofKind.length === 1)
      plugin.dependencies.set(name, registrationOf((ofKind[0] as LoadedPlugin).name));
    else if (ofKind.length === 0) problem(`no ${ref.kind} plugin is loaded`);
    else
      problem(
        `${ofKind.length} ${ref.kind} plugins are loaded (${ofKind.map((p) => p.name).join(', ')}); name one in pluginOfKind('${ref.kind}', name)`,
      );
  }
}

/** Topological order (Kahn), keeping config order among independent plugins; a cycle is a problem. */
function dependencyOrder(plugins: readonly LoadedPlugin[], problems: Problems): LoadedPlugin[] {
  const byRegistration = new Map(plugins.map((p) => [registrationOf(p.name), p]));
  const edges = new Map(
    plugins.map((p) => [
      p,
      [...p.dependencies.values()]
        .map((r) => byRegistration.get(r))
        .filter((d): d is LoadedPlugin => d !== undefined),
    ]),
  );
  const ordered: LoadedPlugin[] = [];
  const remaining = new Set(plugins);
  while (remaining.size > 0) {
    const ready = [...remaining].find((p) => (edges.get(p) ?? []).every((d) => !remaining.has(d)));
    if (!ready) {
      const cycle = [...remaining].map((p) => p.name).join(' -> ');
      for (const plugin of remaining)
        problems.add(plugin.name, plugin.configPath, `dependency cycle among: ${cycle}`);
      return ordered;
    }
    ordered.push(ready);
    remaining.delete(ready);
  }
  return ordered;
}

function readManifest(
  module: unknown,
  specifier: string,
  configPath: string,
  problems: Problems,
): PluginManifest | undefined {
  const exports = module as { default?: unknown; manifest?: unknown };
  const candidate = (exports.manifest ?? exports.default) as Partial<PluginManifest> | undefined;
  const found: string[] = [];
  if (typeof candidate !== 'object' || candidate === null)
    found.push('exports no manifest (default or `manifest`)');
  else {
    if (typeof candidate.kind !== 'string') found.push('manifest.kind must be a string');
    if (typeof candidate.name !== 'string' || !/^[a-z0-9][a-z0-9-]*$/.test(candidate.name)) {
      found.push('manifest.name must be lowercase letters, digits and dashes');
    }
    if (typeof candidate.specVersion !== 'string') found.push('manifest.specVersion must be a string');
    if (typeof candidate.config?.safeParse !== 'function') found.push('manifest.config must be a zod schema');
    if (typeof candidate.create !== 'function') found.push('manifest.create must be a function');
    const { dependencies } = candidate as { dependencies?: unknown };
    if (dependencies !== undefined) {
      if (typeof dependencies !== 'object' || dependencies === null || Array.isArray(dependencies)) {
        found.push(
          'manifest.dependencies must be an object of references by name (coreServices.clock, pluginOfKind(...)), not a list',
        );
      } else {
        for (const [name, ref] of Object.entries(dependencies)) {
          const problem = dependencyRefProblem(ref);
          if (problem) found.push(`manifest.dependencies.${name} ${problem}`);
        }
      }
    }
  }
  const name = typeof candidate?.name === 'string' ? candidate.name : specifier;
  for (const reason of found) problems.add(name, `${configPath}.resolve`, reason);
  return found.length > 0 ? undefined : (candidate as PluginManifest);
}
