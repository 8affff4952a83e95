import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describeSandboxRuntimeKitV2 } from '@sigil/plugin-api/kit';
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

  describeSandboxRuntimeKitV2(load);
});
