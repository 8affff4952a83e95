import { z } from 'zod';
import {
  type CanvasNodeV1,
  type CanvasNodeV2,
  type CurrentInstanceOf,
  nodeLaunch,
  type PackageRegistryV1,
  type PackageRegistryV2,
  type PluginKind,
  type SandboxRuntimeV1,
  type SandboxRuntimeV2,
  SigilError,
  type TeeBackendV1,
  type TeeBackendV2,
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
  if (kind === 'canvas-node' && specVersion === 'v1')
    return canvasNodeFromV1(instance as CanvasNodeV1) as CurrentInstanceOf<K>;
  if (kind === 'tee-backend' && specVersion === 'v1')
    return teeFromV1(instance as TeeBackendV1, pluginName) as CurrentInstanceOf<K>;
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
      const { path: _path, root: _root, bin: _bin, ...entry } = installed;
      return { ...entry, launch: nodeLaunch(installed, entryPoint) };
    },
    cacheStatus: async () => {
      const status = await v1.cacheStatus();
      return { entries: status.entries, bytes: status.summary.bytes };
    },
  };
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

/**
 * A v1 TEE backend attests and seals as before, but verifies nothing: its verify() answers every
 * evidence of its platform with one failed check saying so, so nothing it is asked to judge is trusted.
 */
function teeFromV1(v1: TeeBackendV1, pluginName: string): TeeBackendV2 {
  return {
    specVersion: 'v2',
    platform: v1.platform,
    status: () => v1.status(),
    attest: (reportData) => v1.attest(reportData),
    signingKey: (purpose) => v1.signingKey(purpose),
    verify: (evidence) => {
      if (evidence.platform !== v1.platform)
        return Promise.reject(
          new SigilError(
            'invalid_request',
            `${pluginName} verifies ${v1.platform} evidence, not ${evidence.platform}`,
            {
              details: { reason: 'platform_mismatch' },
            },
          ),
        );
      return Promise.resolve({
        platform: v1.platform,
        verified: false,
        checks: [
          {
            id: 'verifier',
            ok: false,
            detail: `the plugin "${pluginName}" implements tee-backend v1, which verifies no evidence`,
          },
        ],
      });
    },
  };
}

/**
 * A v1 canvas node has untyped params and reads its upstream nodes' outputs by node id: it gets one
 * optional `upstream` input (an object of those outputs, by node id) and gives its whole result on
 * `output`. A v1 node that writes is a `writes` node, approvals enforced by the executor.
 */
function canvasNodeFromV1(v1: CanvasNodeV1): CanvasNodeV2 {
  return {
    specVersion: 'v2',
    nodeKind: v1.nodeKind,
    description: `${v1.nodeKind} (a canvas-node v1 plugin)`,
    effect: v1.writes ? 'writes' : 'reads',
    params: z.record(z.string(), z.unknown()),
    ports: () => ({
      inputs: { upstream: { type: 'object', required: false } },
      outputs: { output: { type: 'object' } },
    }),
    example: { params: {}, inputs: {} },
    run: async (context) => {
      if (v1.writes && (context.approvals.length === 0 || context.approvals.some((a) => !a.approved)))
        throw new SigilError(
          'forbidden',
          `Node ${context.nodeId} writes, and no approval upstream approved it`,
          {
            details: { reason: 'approval_required', nodeId: context.nodeId },
          },
        );
      const upstream = (context.inputs.upstream ?? {}) as Record<string, Record<string, unknown>>;
      const output = await v1.run({
        params: context.params,
        upstream,
        log: (message) => context.log(message),
        signal: context.signal,
      });
      return { output };
    },
  };
}
