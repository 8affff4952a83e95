import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { expect } from 'chai';
import type Docker from 'dockerode';
import {
  contractChecks,
  describeSandboxRuntimeKitV2,
  EvidenceRedactor,
  runChecks,
  sandboxRuntimeKitV2,
} from '@sigil/plugin-api/kit';
import { configSchema, LinuxNamespacesRuntime } from '../../../plugins/sandboxes/linux-namespaces/index.ts';
import { quietLogger } from '../../support/kernel.ts';
import { DockerProbes } from './docker-support.ts';

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

/**
 * sandbox-docker passes the same kit on the test engine (test/support/docker.ts), each check on a
 * runtime of its own, its node programs in an image without the probe's tools (the kit binds those
 * in). The engine is started before the kit: when it cannot start, the hook fails and so does this
 * suite (a runtime would start regardless and only refuse spawns, which some checks would take for
 * "not applicable"). docker.test.ts covers what is specific to the engine.
 */
describe('sandbox-docker passes the sandbox-runtime kit', function () {
  const probes = new DockerProbes();
  before(async function () {
    this.timeout(600_000);
    await probes.start();
  });
  after(() => probes.stop());

  const load = () => probes.runtime({ images: probes.engine.kitImages });

  describeSandboxRuntimeKitV2(load);

  /**
   * Runs the kit's checks `ids` on runtimes whose containers lack one of the plugin's constraints
   * (`undo` rewrites what the runtime asks the engine for); returns the failures' reasons by id.
   */
  async function failuresWithout(
    undo: (options: Docker.ContainerCreateOptions) => Docker.ContainerCreateOptions,
    ids: string[],
  ): Promise<Record<string, string>> {
    const weakened = async () => {
      const runtime = await load();
      const api = runtime.engine.api;
      const create = api.createContainer.bind(api);
      api.createContainer = ((options: Docker.ContainerCreateOptions) =>
        create(undo(options))) as typeof api.createContainer;
      return runtime;
    };
    const checks = contractChecks(sandboxRuntimeKitV2, weakened).filter((check) => ids.includes(check.id));
    const results = await runChecks(checks, {
      redactor: new EvidenceRedactor(),
      timeoutMs: 60_000,
      contextFor: (evidence) => ({ evidence }),
    });
    return Object.fromEntries(
      results.filter((result) => result.status === 'fail').map((result) => [result.id, result.reason ?? '']),
    );
  }

  const withHostConfig =
    (change: (host: Docker.HostConfig) => Docker.HostConfig) => (options: Docker.ContainerCreateOptions) => ({
      ...options,
      HostConfig: change(options.HostConfig ?? {}),
    });

  it("the kit fails it with the engine's /dev: writable, and a pty multiplexer in /dev/pts", async function () {
    this.timeout(120_000);
    const failures = await failuresWithout(
      withHostConfig(({ Tmpfs, ...host }) => ({ ...host, Tmpfs: { '/tmp': Tmpfs?.['/tmp'] ?? '' } })),
      ['sandbox-runtime.read-only-root', 'sandbox-runtime.read-only-mounts'],
    );
    expect(failures['sandbox-runtime.read-only-root']).to.include('/dev/pts/ptmx');
    expect(failures['sandbox-runtime.read-only-mounts']).to.match(/mounted read-write: .*\/dev\b/);
  });

  it("the kit fails it with the engine's init as PID 1: the engine's environment, its binary bound in", async function () {
    this.timeout(120_000);
    const failures = await failuresWithout(
      withHostConfig((host) => ({ ...host, Init: true })),
      ['sandbox-runtime.no-host-traces'],
    );
    expect(failures['sandbox-runtime.no-host-traces']).to.include('/proc/1/environ holds HOSTNAME=');
  });

  it("the kit fails it when its resolver files carry this host's name", async function () {
    this.timeout(120_000);
    const failures = await failuresWithout(
      (options) => ({ ...options, Hostname: hostname() }),
      ['sandbox-runtime.no-host-traces'],
    );
    expect(failures['sandbox-runtime.no-host-traces']).to.equal(
      `/etc/hostname names this host's ${hostname()}`,
    );
  });
});
