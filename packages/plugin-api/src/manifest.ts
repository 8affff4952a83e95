import type { z } from 'zod';
import type { PluginInstanceOf, PluginKind, SpecVersion } from './contracts/index.ts';
import type { DependencyRefs, ResolvedDependencies } from './dependencies.ts';
import type { Extension } from './extensions.ts';
import type { PluginLogger } from './services.ts';

/** Optional lifecycle a plugin instance may implement; the host starts in dependency order, stops in reverse. */
export interface PluginLifecycle {
  start?(): Promise<void> | void;
  stop?(): Promise<void> | void;
}

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
  kind: K;
  /**
   * Unique among loaded plugins unless the config gives an instance `id`. Lowercase, dash-separated;
   * not the name of a core service (`db`, `logger`, `clock`, `secrets`, `fetch`).
   */
  name: string;
  specVersion: V;
  description?: string;
  /** Options schema; its errors are reported with their path under `plugins.N.options`. */
  config: Schema;
  /** What the factory needs: `coreServices.*` and `pluginOfKind(...)` references, by name. */
  dependencies?: Refs;
  /**
   * The keys of extension points this plugin serves, e.g. `[provide(extensionPoints.registryKinds,
   * 'npm')]`: its instance is what the point's users get for each key. A plugin of a kind that has
   * extension points provides at least one key of each; two loaded plugins never provide the same key
   * of a point (the host refuses to start, naming both).
   */
  provides?: readonly Extension<PluginInstanceOf<K, V>>[];
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
