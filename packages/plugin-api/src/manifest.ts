import type { z } from 'zod';
import type { CurrentInstanceOf, PluginInstanceOf, PluginKind, SpecVersion } from './contracts/index.ts';
import type { DependencyRefs, ResolvedDependencies } from './dependencies.ts';
import type { Extension } from './extensions.ts';
import type { PluginLogger } from './services.ts';

/**
 * What an instance may implement besides its contract, both optional: the host starts plugins in
 * dependency order and stops them in reverse.
 */
export interface PluginLifecycle {
  /**
   * Called once, after every plugin is created and after the plugins this one depends on have
   * started: open connections, start schedules. A throw stops the start-up (exit 2) naming the
   * plugin, after the plugins already started (and this one) are stopped.
   */
  start?(): Promise<void> | void;
  /**
   * Called once at shutdown, in the reverse order of starting: close what `start` opened. A throw is
   * logged and does not keep the other plugins running.
   */
  stop?(): Promise<void> | void;
}

/** What `create` receives. */
export interface PluginContext<Config, Refs extends DependencyRefs = DependencyRefs> {
  /** The plugin's options, already parsed by its schema. */
  config: Config;
  /** What the manifest declared in `dependencies`, by the same names, resolved and typed. */
  deps: ResolvedDependencies<Refs>;
  /** A logger bound to this plugin's name. */
  logger: PluginLogger;
}

/**
 * What a plugin module exports (as `default` or `manifest`). The `kind` and `specVersion` pick the
 * contract its factory must return; the host refuses kinds and versions it does not know.
 */
export interface PluginManifest<
  K extends PluginKind = PluginKind,
  V extends SpecVersion<K> = SpecVersion<K>,
  Schema extends z.ZodType = z.ZodType,
  Refs extends DependencyRefs = DependencyRefs,
> {
  /** The contract the instance implements: one of `PLUGIN_KINDS`. */
  kind: K;
  /**
   * Unique among loaded plugins unless the config gives an instance `id`. Lowercase, dash-separated;
   * not the name of a core service (`db`, `logger`, `clock`, `secrets`, `fetch`).
   */
  name: string;
  /** The version of the kind's contract the instance implements; one of `SUPPORTED_SPEC_VERSIONS`. */
  specVersion: V;
  /** One line saying what the plugin does. */
  description?: string;
  /**
   * The zod schema of the plugin's options (`plugins[].options` in sigil.config.json), parsed at
   * start-up before any plugin is created: the factory gets what it returns, defaults applied. Its
   * errors are reported with their path under `plugins.N.options`; `.describe()` on each option is
   * what the configuration reference shows. Options named like a secret (`secret`, `token`, `apiKey`,
   * `password`, …) are redacted from `sigil config check`.
   */
  config: Schema;
  /** What the factory needs: `coreServices.*` and `pluginOfKind(...)` references, by name. */
  dependencies?: Refs;
  /**
   * The keys of extension points this plugin serves, e.g. `[provide(extensionPoints.registryKinds,
   * 'npm')]`: its instance is what the point's users get for each key. A plugin of a kind that has
   * extension points provides at least one key of each; two loaded plugins never provide the same key
   * of a point (the host refuses to start, naming both). The point's users get the instance as its
   * kind's current contract (adapted, for an older spec version).
   */
  provides?: readonly Extension<CurrentInstanceOf<K>>[];
  /**
   * Makes the instance, once, after the manifests, options and dependencies of all plugins were
   * checked and the plugins it depends on were created. A throw stops the start-up (exit 2) naming the
   * plugin.
   */
  create(
    context: PluginContext<z.infer<Schema>, Refs>,
  ): Promise<PluginInstanceOf<K, V> & PluginLifecycle> | (PluginInstanceOf<K, V> & PluginLifecycle);
}

/**
 * Checks a manifest against its kind's contract at compile time, keeps `specVersion` a literal and
 * types the factory's `deps` from `dependencies`.
 */
export function definePlugin<
  K extends PluginKind,
  V extends SpecVersion<K>,
  Schema extends z.ZodType,
  Refs extends DependencyRefs = Record<never, never>,
>(manifest: PluginManifest<K, V, Schema, Refs>): PluginManifest<K, V, Schema, Refs> {
  return manifest;
}
