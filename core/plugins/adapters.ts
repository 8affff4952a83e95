import { join } from 'node:path';
import {
  type CurrentInstanceOf,
  type EntryPoint,
  type InstalledPackage,
  type PackageRegistryV1,
  type PackageRegistryV2,
  type PluginKind,
  type SandboxRuntimeV1,
  type SandboxRuntimeV2,
  SigilError,
} from '@sigil/plugin-api';

/**
 * Adapters from the older spec versions a host still supports to each kind's current contract, so
 * services see one contract per kind while a plugin written against an older one keeps working (as
 * the AI SDK adapts its provider specs). An instance of the current version passes through untouched.
 */
export function currentContract<K extends PluginKind>(
  kind: K,
  specVersion: string,
  instance: unknown,
  pluginName: string,
): CurrentInstanceOf<K> {
  if (kind === 'package-registry' && specVersion === 'v1')
    return registryFromV1(instance as PackageRegistryV1) as CurrentInstanceOf<K>;
  if (kind === 'sandbox-runtime' && specVersion === 'v1')
    return sandboxFromV1(instance as SandboxRuntimeV1, pluginName) as CurrentInstanceOf<K>;
  return instance as CurrentInstanceOf<K>;
}

/**
 * A v1 registry installs Node packages and runs nothing on a schedule once its warm set is empty (the
 * gateway schedules refreshes now): its install answers a Node launch of the entry point's file.
 */
function registryFromV1(v1: PackageRegistryV1): PackageRegistryV2 {
  return {
    specVersion: 'v2',
    registryKind: v1.registryKind,
    resolve: (spec) => v1.resolve(spec.name, spec.range),
    install: async (resolved, entryPoint) => {
      const installed = await v1.install(resolved);
      const { path: _path, root, bin: _bin, ...entry } = installed;
      return {
        ...entry,
        launch: {
          kind: 'host',
          runtime: 'node',
          root,
          args: [nodeEntryFile(installed, entryPoint), ...entryPoint.args],
        },
      };
    },
    cacheStatus: async () => {
      const status = await v1.cacheStatus();
      return { entries: status.entries, bytes: status.summary.bytes };
    },
  };
}

/** The file a v1 (Node) package runs for an entry point: a path inside it, a named bin, or its only bin. */
function nodeEntryFile(installed: InstalledPackage, entryPoint: EntryPoint): string {
  if (entryPoint.path !== undefined) return join(installed.path, entryPoint.path);
  const bins = Object.keys(installed.bin);
  const name = entryPoint.bin ?? (bins.length === 1 ? bins[0] : undefined);
  const file = name === undefined || entryPoint.module !== undefined ? undefined : installed.bin[name];
  if (file === undefined) {
    throw new SigilError(
      'not_found',
      `Package ${installed.name}@${installed.version} has no executable ${entryPoint.bin === undefined ? '(give entry.bin)' : `"${entryPoint.bin}"`}`,
      { hint: `It provides: ${bins.join(', ') || 'none'}`, details: { reason: 'not_found' } },
    );
  }
  return file;
}

/**
 * A v1 sandbox runs host programs given as a command: Node's with the gateway's own node, binaries as
 * they are. Not Python's: v1 mounts a command's libraries but not an interpreter's standard library.
 */
function sandboxFromV1(v1: SandboxRuntimeV1, pluginName: string): SandboxRuntimeV2 {
  return {
    specVersion: 'v2',
    spawn: async ({ launch, env, networkAllowList, limits }) => {
      if (launch.kind !== 'host' || launch.runtime === 'python') {
        const what = launch.kind === 'host' ? 'Python programs' : 'OCI images';
        throw new SigilError('unavailable', `The sandbox plugin "${pluginName}" (v1) does not run ${what}`, {
          hint: 'Use a sandbox-runtime v2 plugin whose status() lists them (linux-namespaces, docker)',
          details: { reason: 'runtime_unsupported' },
        });
      }
      const command = launch.runtime === 'node' ? process.execPath : launch.command;
      if (command === undefined)
        throw new SigilError('invalid_request', 'A binary launch names no command', {
          details: { reason: 'no_command' },
        });
      return v1.spawn({
        packagePath: launch.root,
        command,
        args: launch.args,
        ...(launch.cwd === undefined ? {} : { cwd: launch.cwd }),
        env: { ...launch.env, ...env },
        networkAllowList,
        ...(launch.readOnlyPaths === undefined ? {} : { readOnlyPaths: launch.readOnlyPaths }),
        ...(limits === undefined ? {} : { limits }),
      });
    },
    status: async () => ({
      runtime: pluginName,
      runs: { host: ['node', 'binary'], image: false },
      namespaces: [],
      limits: 'unknown',
      network: 'unknown',
      syscallFilter: {
        enforced: false,
        reason: `the plugin implements sandbox-runtime v1, which reports no status`,
      },
      running: 0,
      details: { specVersion: 'v1' },
    }),
  };
}
