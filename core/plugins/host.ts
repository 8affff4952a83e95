import { createRequire } from 'node:module';
import { isAbsolute, join, resolve as resolvePath } from 'node:path';
import { pathToFileURL } from 'node:url';
import { asValue, createContainer, type AwilixContainer } from 'awilix';
import { SigilError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { PluginEntry } from '../config/schema.ts';
import {
  PLUGIN_KINDS,
  SUPPORTED_SPEC_VERSIONS,
  type PluginInstanceOf,
  type PluginKind,
} from './contracts/index.ts';
import type { CoreServices, PluginLifecycle, PluginManifest } from './manifest.ts';

export type PluginState = 'loaded' | 'starting' | 'started' | 'stopping' | 'stopped' | 'failed';

export interface PluginStatus {
  name: string;
  kind: PluginKind;
  specVersion: string;
  /** Where it came from: `builtin:<name>`, a package name, or a path. */
  source: string;
  state: PluginState;
}

/** A start-up failure that names the plugin, the config path at fault, and why. */
export class PluginLoadError extends SigilError {
  readonly plugin: string;
  readonly configPath: string;
  readonly reason: string;
  constructor(plugin: string, configPath: string, reason: string) {
    super('plugin_invalid', `plugin "${plugin}" (${configPath}): ${reason}`);
    this.plugin = plugin;
    this.configPath = configPath;
    this.reason = reason;
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
  instance?: PluginLifecycle;
  state: PluginState;
}

export interface PluginHostOptions {
  builtins: BuiltinPlugins;
  core: CoreServices;
  logger: Logger;
  /** Directory that relative plugin paths and package names resolve from (the config file's). */
  baseDir: string;
}

/**
 * Loads plugins named in the config, checks them, creates them in dependency order through an Awilix
 * container, and runs their lifecycle. Every failure is a PluginLoadError raised before anything starts.
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
    const candidates: LoadedPlugin[] = [];
    for (const [index, entry] of entries.entries()) {
      if (!entry.enabled) continue;
      candidates.push(await this.inspect(entry, `plugins.${index}`));
    }
    const byName = new Map<string, LoadedPlugin>();
    for (const plugin of candidates) {
      const twin = byName.get(plugin.name);
      if (twin) {
        throw new PluginLoadError(
          plugin.name,
          `${plugin.configPath}.id`,
          `duplicate name: ${twin.configPath} already loads a plugin named "${plugin.name}"; give one of them a distinct "id"`,
        );
      }
      byName.set(plugin.name, plugin);
    }
    for (const plugin of this.dependencyOrder(candidates)) {
      const deps: Record<string, unknown> = {};
      for (const dependency of plugin.manifest.dependencies ?? []) {
        deps[dependency] = this.container.resolve(this.registrationFor(dependency, plugin, candidates));
      }
      try {
        plugin.instance = await plugin.manifest.create({
          config: plugin.options,
          deps,
          logger: this.options.logger.child({ plugin: plugin.name }),
        });
      } catch (cause) {
        throw new PluginLoadError(
          plugin.name,
          plugin.configPath,
          `factory failed: ${(cause as Error).message}`,
        );
      }
      this.container.register(plugin.name, asValue(plugin.instance));
      this.plugins.push(plugin);
    }
  }

  async start(): Promise<void> {
    for (const plugin of this.plugins) {
      plugin.state = 'starting';
      try {
        await plugin.instance?.start?.();
        plugin.state = 'started';
      } catch (cause) {
        plugin.state = 'failed';
        throw new PluginLoadError(
          plugin.name,
          plugin.configPath,
          `start failed: ${(cause as Error).message}`,
        );
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

  /** All loaded instances of a kind, in load order. */
  all<K extends PluginKind>(kind: K): PluginInstanceOf<K>[] {
    return this.plugins.filter((p) => p.manifest.kind === kind).map((p) => p.instance as PluginInstanceOf<K>);
  }

  /** The one instance of a kind; a clear error when none or several are loaded. */
  one<K extends PluginKind>(kind: K): PluginInstanceOf<K> {
    const found = this.all(kind);
    if (found.length !== 1) {
      throw new SigilError('config_invalid', `expected exactly one "${kind}" plugin, found ${found.length}`, {
        hint: `List one plugin of kind ${kind} under "plugins" in sigil.config.json`,
      });
    }
    return found[0] as PluginInstanceOf<K>;
  }

  private async inspect(entry: PluginEntry, configPath: string): Promise<LoadedPlugin> {
    const { module, source } = await this.importModule(entry.resolve, configPath);
    const manifest = readManifest(module, entry.resolve, configPath);
    const name = entry.id ?? manifest.name;
    if (!(PLUGIN_KINDS as readonly string[]).includes(manifest.kind)) {
      throw new PluginLoadError(
        name,
        configPath,
        `unknown kind "${manifest.kind}"; known kinds: ${PLUGIN_KINDS.join(', ')}`,
      );
    }
    const supported = SUPPORTED_SPEC_VERSIONS[manifest.kind] as readonly string[];
    if (!supported.includes(manifest.specVersion)) {
      throw new PluginLoadError(
        name,
        configPath,
        `specVersion "${manifest.specVersion}" of kind ${manifest.kind} is not supported by this core (supported: ${supported.join(', ')})`,
      );
    }
    const parsed = manifest.config.safeParse(entry.options);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const path = [configPath, 'options', ...(issue?.path ?? []).map(String)].join('.');
      throw new PluginLoadError(name, path, `invalid config: ${issue?.message ?? 'rejected by schema'}`);
    }
    return { manifest, name, configPath, source, options: parsed.data, state: 'loaded' };
  }

  private async importModule(
    specifier: string,
    configPath: string,
  ): Promise<{ module: unknown; source: string }> {
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
      throw new PluginLoadError(
        specifier,
        `${configPath}.resolve`,
        `cannot load "${specifier}": ${(cause as Error).message.split('\n')[0]} (built-in plugins: ${known})`,
      );
    }
  }

  /** Topological order (Kahn), keeping config order among independent plugins. */
  private dependencyOrder(plugins: readonly LoadedPlugin[]): LoadedPlugin[] {
    const edges = new Map<LoadedPlugin, LoadedPlugin[]>();
    for (const plugin of plugins) {
      edges.set(
        plugin,
        (plugin.manifest.dependencies ?? [])
          .map((dependency) => this.pluginFor(this.registrationFor(dependency, plugin, plugins), plugins))
          .filter((p): p is LoadedPlugin => p !== undefined),
      );
    }
    const ordered: LoadedPlugin[] = [];
    const remaining = new Set(plugins);
    while (remaining.size > 0) {
      const ready = [...remaining].find((p) => (edges.get(p) ?? []).every((d) => !remaining.has(d)));
      if (!ready) {
        const cycle = [...remaining].map((p) => p.name).join(' -> ');
        const first = [...remaining][0] as LoadedPlugin;
        throw new PluginLoadError(first.name, `${first.configPath}`, `dependency cycle among: ${cycle}`);
      }
      ordered.push(ready);
      remaining.delete(ready);
    }
    return ordered;
  }

  private pluginFor(registration: string, plugins: readonly LoadedPlugin[]): LoadedPlugin | undefined {
    return plugins.find((p) => p.name === registration);
  }

  /** Maps a declared dependency to a container registration: a core service, a plugin name, or a kind. */
  private registrationFor(
    dependency: string,
    dependent: LoadedPlugin,
    plugins: readonly LoadedPlugin[],
  ): string {
    if (dependency in this.options.core) return dependency;
    if (plugins.some((p) => p.name === dependency)) return dependency;
    const ofKind = plugins.filter((p) => p.manifest.kind === dependency);
    if (ofKind.length === 1) return (ofKind[0] as LoadedPlugin).name;
    const reason =
      ofKind.length > 1
        ? `dependency "${dependency}" is ambiguous: ${ofKind.map((p) => p.name).join(', ')} are loaded; depend on one by name`
        : `missing dependency "${dependency}": no core service, plugin or plugin kind of that name is loaded`;
    throw new PluginLoadError(dependent.name, `${dependent.configPath}`, reason);
  }
}

function readManifest(module: unknown, specifier: string, configPath: string): PluginManifest {
  const exports = module as { default?: unknown; manifest?: unknown };
  const candidate = (exports.manifest ?? exports.default) as Partial<PluginManifest> | undefined;
  const problems: string[] = [];
  if (typeof candidate !== 'object' || candidate === null)
    problems.push('exports no manifest (default or `manifest`)');
  else {
    if (typeof candidate.kind !== 'string') problems.push('manifest.kind must be a string');
    if (typeof candidate.name !== 'string' || !/^[a-z0-9][a-z0-9-]*$/.test(candidate.name)) {
      problems.push('manifest.name must be lowercase letters, digits and dashes');
    }
    if (typeof candidate.specVersion !== 'string') problems.push('manifest.specVersion must be a string');
    if (typeof candidate.config?.safeParse !== 'function')
      problems.push('manifest.config must be a zod schema');
    if (typeof candidate.create !== 'function') problems.push('manifest.create must be a function');
    if (candidate.dependencies !== undefined && !Array.isArray(candidate.dependencies)) {
      problems.push('manifest.dependencies must be an array of names');
    }
  }
  if (problems.length > 0) throw new PluginLoadError(specifier, `${configPath}.resolve`, problems.join('; '));
  return candidate as PluginManifest;
}
