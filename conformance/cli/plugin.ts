import { importPluginModule, PluginNotFound, runPluginKit } from '../plugin.ts';
import { exiting, finish, printResult, UsageError } from './outcome.ts';

/** `sigil conformance plugin`: the manifest kit and its kind's contract kit against a plugin module. */

async function pluginCommand(specifier: string, options: { options: string; out?: string }): Promise<number> {
  let pluginOptions: unknown;
  try {
    pluginOptions = JSON.parse(options.options);
  } catch {
    throw new UsageError('--options must be JSON');
  }
  if (typeof pluginOptions !== 'object' || pluginOptions === null || Array.isArray(pluginOptions)) {
    throw new UsageError('--options must be a JSON object');
  }
  let loaded;
  try {
    loaded = await importPluginModule(specifier, process.cwd());
  } catch (err) {
    if (err instanceof PluginNotFound) throw new UsageError(err.message);
    throw err;
  }
  process.stdout.write(`Checking plugin module ${loaded.source}\n\n`);
  const report = await runPluginKit(loaded, {
    options: pluginOptions as Record<string, unknown>,
    onResult: printResult,
  });
  return finish(report, options.out);
}

/** Exits 0 when no MUST failed, 1 when one did, 2 for bad arguments. */
export const runPluginCommand = exiting(pluginCommand);
