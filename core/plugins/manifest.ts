import type { z } from 'zod';
import type { Clock } from '../clock.ts';
import type { Database } from '../db/database.ts';
import type { Logger, SecretRegistry } from '../log.ts';
import type { PluginInstanceOf, PluginKind, SpecVersion } from './contracts/index.ts';

/** Services of the core that any plugin may declare as a dependency by these names. */
export interface CoreServices {
  db: Database;
  logger: Logger;
  clock: Clock;
  secrets: SecretRegistry;
}

export const CORE_SERVICE_NAMES: readonly (keyof CoreServices)[] = ['db', 'logger', 'clock', 'secrets'];

/** Optional lifecycle a plugin instance may implement; the host starts in dependency order, stops in reverse. */
export interface PluginLifecycle {
  start?(): Promise<void> | void;
  stop?(): Promise<void> | void;
}

export interface PluginContext<Config> {
  /** The plugin's options, already parsed by its schema. */
  config: Config;
  /**
   * What the manifest declared in `dependencies`, by the same names: core services (`db`, `logger`,
   * `clock`, `secrets`), another plugin's instance name, or a plugin kind (when exactly one is loaded).
   */
  deps: Readonly<Record<string, unknown>>;
  /** A logger bound to this plugin's name. */
  logger: Logger;
}

/**
 * What a plugin module exports (as `default` or `manifest`). The `kind` and `specVersion` pick the
 * contract its factory must return; the host refuses kinds and versions it does not know.
 */
export interface PluginManifest<
  K extends PluginKind = PluginKind,
  V extends SpecVersion<K> = SpecVersion<K>,
  Schema extends z.ZodType = z.ZodType,
> {
  kind: K;
  /** Unique among loaded plugins unless the config gives an instance `id`. Lowercase, dash-separated. */
  name: string;
  specVersion: V;
  description?: string;
  /** Options schema; its errors are reported with their path under `plugins.N.options`. */
  config: Schema;
  dependencies?: readonly string[];
  create(
    context: PluginContext<z.infer<Schema>>,
  ): Promise<PluginInstanceOf<K, V> & PluginLifecycle> | (PluginInstanceOf<K, V> & PluginLifecycle);
}

/** Identity helper that checks a manifest against its kind's contract at compile time. */
export function definePlugin<K extends PluginKind, V extends SpecVersion<K>, Schema extends z.ZodType>(
  manifest: PluginManifest<K, V, Schema>,
): PluginManifest<K, V, Schema> {
  return manifest;
}
