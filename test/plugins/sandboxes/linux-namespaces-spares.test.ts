import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { expect } from 'chai';
import type { LinuxNamespacesRuntime } from '../../../plugins/sandboxes/linux-namespaces/index.ts';
import { markedProcesses } from '../../../plugins/sandboxes/linux-namespaces/leftovers.ts';
import type { LinuxSandboxProcess } from '../../../plugins/sandboxes/linux-namespaces/sandbox-process.ts';
import { hostSpec, ProbeRuntimes, shellSpec, type SpecOptions } from './support.ts';

/**
 * Spares (plugins/sandboxes/linux-namespaces/spares.ts): when a sandbox ends, one of the same plan is
 * built and waits at its init for the environment; the next spawn of that plan takes it. Real
 * sandboxes, as root, as the runtime runs in production.
 */

/** Outside the default range and the users test's, so no other runtime on this host hands these out. */
const TEST_RANGE = 0x70010100;

/** /proc/<pid>/stat, or nothing once the process is gone. */
function readStat(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'latin1');
  } catch {
    return ') X ';
  }
}

/** Where the runtime makes its sandboxes' pids cgroups, when the host has cgroup v1 (cgroups.ts). */
const SANDBOX_CGROUPS = '/sys/fs/cgroup/pids/sigil';

/** Prints the variables WHO and OLD (or `unset`) on one line, then waits for stdin to close. */
const ECHO_ENV = ['-c', 'echo "$WHO:${OLD-unset}"; while read -r line; do :; done'];

describe('sandbox-linux-namespaces: spares built ahead of need', function () {
  this.timeout(30_000);
  let probes: ProbeRuntimes;

  before(() => (probes = new ProbeRuntimes('spares')));
  afterEach(() => probes.stop());
  after(() => probes?.remove());

  /** Ids of the sandboxes of `runtime` whose processes run now (spares included). */
  const liveIds = (runtime: LinuxNamespacesRuntime) =>
    new Set(
      markedProcesses()
        .filter((p) => p.owner === runtime.owner)
        .map((p) => p.id),
    );

  /** Spawns `spec` and resolves with its sandbox and the first line it prints. */
  async function run(runtime: LinuxNamespacesRuntime, spec: ReturnType<typeof shellSpec>) {
    const sandbox = (await runtime.spawn(spec)) as LinuxSandboxProcess;
    sandbox.stderr.resume();
    let out = '';
    const line = await new Promise<string>((resolve, reject) => {
      sandbox.stdout.on('data', (chunk: Buffer) => {
        out += chunk.toString();
        if (out.includes('\n')) resolve(out.split('\n')[0] as string);
      });
      void sandbox.exited.then((exit) => reject(new Error(`ended before a line: ${JSON.stringify(exit)}`)));
    });
    return { sandbox, line };
  }

  /** Runs `spec` to its first line and kills it; resolves once a spare of it is built (or none is). */
  async function runAndEnd(runtime: LinuxNamespacesRuntime, spec: ReturnType<typeof shellSpec>) {
    const { sandbox, line } = await run(runtime, spec);
    await sandbox.kill();
    return { line, spares: await runtime.sparesReady() };
  }

  const echoEnv = (options?: SpecOptions) => shellSpec(ECHO_ENV, options);

  it("starts a server's next sandbox from the spare built when its last one ended, with only the new environment", async () => {
    const runtime = await probes.runtime();
    const first = await runAndEnd(runtime, echoEnv({ env: { WHO: 'first', OLD: 'canary-5f1e-secret' } }));
    expect(first.line).to.equal('first:canary-5f1e-secret');
    expect(first.spares).to.equal(1);
    expect((await runtime.status()).details.spares).to.deep.equal({ count: 4, waiting: 1 });
    const built = liveIds(runtime);
    expect(built.size, 'the spare waits, set up, before any spawn asks for it').to.equal(1);

    const { sandbox, line } = await run(runtime, echoEnv({ env: { WHO: 'second' } }));
    expect(built.has(sandbox.id), 'the spawn took the spare').to.equal(true);
    // The spare held no environment: the first run's secret never reaches the second.
    expect(line).to.equal('second:unset');
    expect((await runtime.status()).details.spares.waiting).to.equal(0);
    await sandbox.kill();
  });

  it('keeps a spare for its own plan only: other arguments, limits or allow-list get a sandbox built for them', async () => {
    const runtime = await probes.runtime();
    expect((await runAndEnd(runtime, echoEnv({ env: { WHO: 'a' } }))).spares).to.equal(1);
    const spare = [...liveIds(runtime)][0];
    for (const other of [
      shellSpec(['-c', 'echo other; while read -r line; do :; done']),
      echoEnv({ env: { WHO: 'b' }, limits: { pids: 20 } }),
      echoEnv({ env: { WHO: 'c' }, allow: ['127.0.0.1:9'] }),
    ]) {
      const { sandbox } = await run(runtime, other);
      expect(sandbox.id).to.not.equal(spare);
      await sandbox.kill();
    }
    // The first plan's spare still waits, and is taken by that plan.
    const { sandbox, line } = await run(runtime, echoEnv({ env: { WHO: 'd' } }));
    expect(line).to.equal('d:unset');
    expect(sandbox.id).to.equal(spare);
    await sandbox.kill();
  });

  it('builds none with spares.count 0', async () => {
    const runtime = await probes.runtime({ spares: { count: 0 } });
    expect((await runAndEnd(runtime, echoEnv({ env: { WHO: 'a' } }))).spares).to.equal(0);
    expect(liveIds(runtime).size).to.equal(0);
    expect((await runtime.status()).details.spares).to.deep.equal({ count: 0, waiting: 0 });
  });

  it('does not hand out a spare that died, nor one built on an install root replaced since', async () => {
    const runtime = await probes.runtime();
    const root = join(probes.stateDir, 'package');
    const install = (message: string) => {
      rmSync(root, { recursive: true, force: true });
      mkdirSync(root);
      chmodSync(root, 0o755);
      symlinkSync('/bin/sh', join(root, 'sh'));
      writeFileSync(join(root, 'message'), `${message}\n`, { mode: 0o644 });
    };
    const spec = hostSpec({
      runtime: 'binary',
      root,
      command: join(root, 'sh'),
      args: ['-c', 'read -r m < message; echo "$m"; while read -r line; do :; done'],
    });
    install('one');
    expect(await runAndEnd(runtime, spec)).to.deep.equal({ line: 'one', spares: 1 });

    // Killed from outside: the runtime hears of its end, and the next spawn builds afresh.
    const [dead] = liveIds(runtime);
    const killed = markedProcesses().filter(({ id }) => id === dead);
    for (const { pid } of killed) process.kill(pid, 'SIGKILL');
    // Until the kernel has ended them (zombies, not yet reaped by the runtime), however loaded the host.
    while (killed.some(({ pid }) => !/\) [ZX] /.test(readStat(pid))))
      await new Promise((resolve) => setImmediate(resolve));
    const again = await run(runtime, spec);
    expect(again.sandbox.id).to.not.equal(dead);
    expect(again.line).to.equal('one');
    await again.sandbox.kill();
    expect(await runtime.sparesReady()).to.equal(1);

    // Installed again at the same path: the spare's mounts show the old root, so it is not used.
    const [stale] = liveIds(runtime);
    install('two');
    const fresh = await run(runtime, spec);
    expect(fresh.sandbox.id).to.not.equal(stale);
    expect(fresh.line).to.equal('two');
    await fresh.sandbox.kill();
  });

  it('discards a spare unused for keepSeconds', async () => {
    const runtime = await probes.runtime({ spares: { keepSeconds: 1 } });
    expect((await runAndEnd(runtime, echoEnv({ env: { WHO: 'a' } }))).spares).to.equal(1);
    const [expiring] = liveIds(runtime);
    // Waits for the discard itself: the spare's processes are gone within about a second.
    while (liveIds(runtime).has(expiring as string)) await new Promise((resolve) => setTimeout(resolve, 50));
    expect((await runtime.status()).details.spares.waiting).to.equal(0);
  });

  it('kills its spares on stop() and leaves nothing of them behind', async () => {
    const other = await probes.runtime();
    expect((await runAndEnd(other, echoEnv({ env: { WHO: 'b' } }))).spares).to.equal(1);
    const ofOther = () => ({
      processes: liveIds(other).size,
      stateDirs: readdirSync(probes.stateDir).filter((name) => name.startsWith(`${other.owner}-`)).length,
      cgroups: existsSync(SANDBOX_CGROUPS)
        ? readdirSync(SANDBOX_CGROUPS).filter((name) => name.startsWith(`${other.owner}-`)).length
        : 0,
    });
    expect(ofOther()).to.deep.include({ processes: 1, stateDirs: 1 });
    await other.stop();
    expect(ofOther()).to.deep.equal({ processes: 0, stateDirs: 0, cgroups: 0 });
  });

  it('gives a sandbox the uids its spares hold when every other uid of the range is taken', async () => {
    const runtime = await probes.runtime({ uidRange: { first: TEST_RANGE, count: 4 } });
    // Two spares: each built while, with it, at most half the range is held.
    await runAndEnd(runtime, echoEnv({ env: { WHO: 'a' } }));
    await runAndEnd(runtime, shellSpec(['-c', 'echo b; while read -r line; do :; done']));
    expect((await runtime.status()).details.users).to.deep.include({ inUse: 2 });
    const c = await run(runtime, shellSpec(['-c', 'echo c; while read -r line; do :; done']));
    const d = await run(runtime, shellSpec(['-c', 'echo d; while read -r line; do :; done']));
    const e = await run(runtime, shellSpec(['-c', 'echo e; while read -r line; do :; done']));
    expect(e.line).to.equal('e');
    expect((await runtime.status()).details.spares.waiting).to.equal(0);
    await Promise.all([c, d, e].map(({ sandbox }) => sandbox.kill()));
  });
});
