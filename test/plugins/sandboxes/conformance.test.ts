import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PluginLifecycle, SandboxRuntimeV1, SandboxRuntimeV2 } from '@sigil/plugin-api';
import {
  contractChecks,
  describeSandboxRuntimeKit,
  registerChecks,
  sandboxRuntimeKit,
} from '@sigil/plugin-api/kit';
import { sandboxRuntimeV2Checks } from '../../../packages/plugin-api/src/kit/sandbox-runtime-v2-checks.ts';
import { configSchema, LinuxNamespacesRuntime } from '../../../plugins/sandboxes/linux-namespaces/index.ts';
import { quietLogger } from '../../support/kernel.ts';

/**
 * The built-in sandbox passes the sandbox-runtime kit: every promise of the contract probed from
 * inside (read-only root, noexec /tmp, capabilities, host user, PID namespace, network, environment,
 * limits, kill), and v2's own (status, the syscall filter call by call, the launch's environment,
 * Python, images refused). The plugin's own tests cover what is specific to it (uid 65534, cgroups,
 * orphans).
 */
describe('sandbox-linux-namespaces passes the sandbox-runtime kit', () => {
  let stateDir: string;
  before(() => {
    stateDir = mkdtempSync(join(tmpdir(), 'sigil-sandbox-kit-state-'));
    chmodSync(stateDir, 0o755);
  });
  after(() => rmSync(stateDir, { recursive: true, force: true }));

  const load = async () => {
    const runtime = new LinuxNamespacesRuntime({
      config: configSchema.parse({ stateDir, killGraceMs: 200 }),
      logger: quietLogger(),
    });
    await runtime.start();
    return runtime;
  };

  // Until the kits are per spec version, v1's checks reach the runtime through the v1 spec they
  // speak: each of its probes is this node running a script in a package, a node launch in v2.
  describe('v1 behaviour, through node launches', () =>
    describeSandboxRuntimeKit(async () => asV1(await load())));

  describe('v2 behaviour', () =>
    registerChecks(
      contractChecks(
        {
          ...sandboxRuntimeKit,
          contractFile: 'packages/plugin-api/src/contracts/sandbox-runtime-v2.ts',
          members: { spawn: 'function', status: 'function' } as typeof sandboxRuntimeKit.members,
          behaviour: sandboxRuntimeV2Checks as typeof sandboxRuntimeKit.behaviour,
        },
        load,
      ),
    ));
});

function asV1(runtime: SandboxRuntimeV2 & PluginLifecycle): SandboxRuntimeV1 & PluginLifecycle {
  return {
    specVersion: 'v1',
    spawn: (spec) => {
      if (spec.command !== process.execPath) throw new Error(`the v1 kit ran ${spec.command}, not node`);
      return runtime.spawn({
        launch: {
          kind: 'host',
          runtime: 'node',
          root: spec.packagePath,
          args: spec.args,
          ...(spec.cwd ? { cwd: spec.cwd } : {}),
          ...(spec.readOnlyPaths ? { readOnlyPaths: spec.readOnlyPaths } : {}),
        },
        env: spec.env,
        networkAllowList: spec.networkAllowList,
        ...(spec.limits ? { limits: spec.limits } : {}),
      });
    },
    stop: () => runtime.stop?.(),
  };
}
