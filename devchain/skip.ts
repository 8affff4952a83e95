import { createRequire } from 'node:module';
import { isAbsolute, join, resolve as resolvePath } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { BuiltinPlugins } from '../core/plugins/host.ts';
import type { SigilConfig } from '../services/config.ts';

// Apart from the chain's modules (viem's clients, the deployment), so that `sigil up` decides without
// loading them whether it starts the chain at all (issue 30, start-up).

export interface SkipOptions {
  builtins: BuiltinPlugins;
  /** Where plugin paths and package names resolve from: the config file's directory, as the kernel does. */
  baseDir: string;
}

/**
 * Why `sigil up` must not start the dev chain, or undefined when it should: it is turned off, or
 * the config lists a payment rail of its own (enabled or not: the operator has chosen), or a listed
 * plugin cannot be loaded (start-up is going to fail on it, with the kernel's precise error).
 */
export async function devChainSkipReason(
  config: SigilConfig,
  options: SkipOptions,
): Promise<string | undefined> {
  if (!config.devChain.enabled) return 'devChain.enabled is false';
  for (const [index, entry] of config.plugins.entries()) {
    const kind = await pluginKind(entry.resolve, options);
    if (kind === 'payment-rail') return `plugins.${index} (${entry.resolve}) is a payment rail`;
    if (kind === undefined) return `plugins.${index} (${entry.resolve}) cannot be loaded`;
  }
  return undefined;
}

/** The manifest kind of a plugin named in the config, resolved as the kernel resolves it. */
async function pluginKind(specifier: string, options: SkipOptions): Promise<string | undefined> {
  try {
    const builtin = options.builtins[specifier];
    let module: unknown;
    if (builtin) module = await builtin();
    else if (specifier.startsWith('.') || isAbsolute(specifier))
      module = await import(pathToFileURL(resolvePath(options.baseDir, specifier)).href);
    else {
      const require = createRequire(join(options.baseDir, 'package.json'));
      let url: string;
      try {
        url = pathToFileURL(require.resolve(specifier)).href;
      } catch {
        url = specifier; // ESM-only packages resolve through import()
      }
      module = await import(url);
    }
    const exports = module as { default?: { kind?: unknown }; manifest?: { kind?: unknown } };
    const kind = (exports.manifest ?? exports.default)?.kind;
    return typeof kind === 'string' ? kind : undefined;
  } catch {
    return undefined;
  }
}
