import { existsSync } from 'node:fs';
import { isAbsolute, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { tsImport } from 'tsx/esm/api';
import {
  KIT_CHECK_TIMEOUT_MS,
  KitServices,
  manifestOf,
  pluginKitChecks,
  pluginName,
  runChecks,
  type CheckResult,
} from '@sigil/plugin-api/kit';
import { buildReport, type Report } from './report.ts';

/** The module named on the command line does not exist: a usage error, not a failing plugin. */
export class PluginNotFound extends Error {}

export interface LoadedPluginModule {
  exports: unknown;
  /** The absolute file, or the package name, it was loaded from. */
  source: string;
}

/**
 * Loads a plugin module as the plugin host would find it: a path (relative to `cwd`), or a package name
 * resolved from `cwd`'s node_modules. TypeScript sources load as they are, through tsx.
 */
export async function importPluginModule(specifier: string, cwd: string): Promise<LoadedPluginModule> {
  if (specifier.startsWith('.') || isAbsolute(specifier)) {
    const file = resolve(cwd, specifier);
    if (!existsSync(file)) throw new PluginNotFound(`no such file: ${file}`);
    return { exports: await import(pathToFileURL(file).href), source: file };
  }
  try {
    // Resolved from the tester's directory, not from Sigil's own node_modules.
    return {
      exports: await tsImport(specifier, pathToFileURL(join(cwd, 'package.json')).href),
      source: specifier,
    };
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (code === 'ERR_MODULE_NOT_FOUND' && String((err as Error).message).includes(`'${specifier}'`)) {
      throw new PluginNotFound(`cannot find package "${specifier}" from ${cwd}`);
    }
    throw err;
  }
}

export interface PluginRunOptions {
  /** The plugin's options, as `plugins[].options` would hold them. */
  options?: Record<string, unknown>;
  onResult?(result: CheckResult): void;
}

/** Runs the generic manifest kit and the contract kit of the plugin's kind. */
export async function runPluginKit(
  loaded: LoadedPluginModule,
  options: PluginRunOptions = {},
): Promise<Report> {
  const services = new KitServices();
  const started = new Date();
  try {
    const checks = pluginKitChecks({ exports: loaded.exports, options: options.options ?? {} }, services);
    const results = await runChecks(checks, {
      redactor: services.redactor,
      timeoutMs: KIT_CHECK_TIMEOUT_MS,
      contextFor: (evidence) => ({ evidence }),
      ...(options.onResult ? { onResult: options.onResult } : {}),
    });
    const kind = manifestOf(loaded.exports)?.kind;
    const target = {
      plugin: pluginName(loaded.exports),
      kind: String(kind ?? '(unknown)'),
      source: loaded.source,
    };
    return buildReport('plugin', target, started, results);
  } finally {
    await services.close();
  }
}
