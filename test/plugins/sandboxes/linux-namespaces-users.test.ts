import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { closeSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { expect } from 'chai';
import { type SandboxProcess, SigilError } from '@sigil/plugin-api';
import { probeReadOnlyPaths } from '@sigil/plugin-api/kit';
import type { LinuxNamespacesRuntime } from '../../../plugins/sandboxes/linux-namespaces/index.ts';
import {
  currentOwner,
  marker,
  markedProcesses,
} from '../../../plugins/sandboxes/linux-namespaces/leftovers.ts';
import { LinuxSandboxProcess } from '../../../plugins/sandboxes/linux-namespaces/sandbox-process.ts';
import {
  SERVER_DENIED,
  type FilterInterpreter,
} from '../../../plugins/sandboxes/linux-namespaces/seccomp.ts';
import { UidAllocator } from '../../../plugins/sandboxes/linux-namespaces/uids.ts';
import { ProbeRuntimes } from './support.ts';

/**
 * What keeps one sandbox's secrets from another through the kernel, beyond the namespaces: a host uid
 * of its own per live sandbox (from the operator's range), and the syscall filter (no keyring, no
 * foreign ABIs). The kit probes the same from outside (distinct-host-users, keyring-*); these tests
 * take each layer alone and the allocator's edges. Run as root, as the runtime is in production.
 */

/** Outside the default range (0x70000000 + 65536), so no other runtime on this host hands these out. */
const TEST_RANGE = 0x70010000;

/**
 * Runs `action` with this process's soft limit on open files lowered to what it holds now, so
 * opening anything fails with EMFILE (set with util-linux's prlimit, which the plugin needs anyway).
 */
async function withoutDescriptors<T>(action: () => Promise<T>): Promise<T> {
  const limit = /^Max open files\s+(\d+)\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'));
  const [soft, hard] = [limit?.[1], limit?.[2]];
  // Headroom for prlimit's own pipes when the limit is put back, taken up until then.
  const headroom = 16;
  execFileSync('prlimit', [
    `--pid=${process.pid}`,
    `--nofile=${readdirSync('/proc/self/fd').length + headroom}:${hard}`,
  ]);
  const fillers: number[] = [];
  try {
    for (;;) fillers.push(openSync('/dev/null', 'r'));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EMFILE') throw error;
  }
  try {
    return await action();
  } finally {
    for (const fd of fillers) closeSync(fd);
    execFileSync('prlimit', [`--pid=${process.pid}`, `--nofile=${soft}:${hard}`]);
  }
}

describe('sandbox-linux-namespaces: host users and the syscall filter', function () {
  this.timeout(30_000);
  let probes: ProbeRuntimes;

  before(() => (probes = new ProbeRuntimes('users')));
  afterEach(() => probes.stop());
  after(() => probes?.remove());

  const newRuntime = (options: Record<string, unknown> = {}, filterInterpreter?: FilterInterpreter) =>
    probes.runtime(options, filterInterpreter);
  // python3, which makes the raw system calls, is mounted in.
  const start = <T>(runtime: LinuxNamespacesRuntime, mode: string, args: string[] = []) =>
    probes.probe<T>(runtime, mode, args, { readOnlyPaths: probeReadOnlyPaths() });

  /** The host uid of the sandbox's launch chain (every process of it runs as the sandbox's user). */
  function hostUid(sandbox: SandboxProcess): number {
    const { id } = sandbox as LinuxSandboxProcess;
    const uids = markedProcesses()
      .filter((p) => p.id === id)
      .map((p) => Number(/^Uid:\t(\d+)/m.exec(readFileSync(`/proc/${p.pid}/status`, 'utf8'))?.[1]));
    expect(new Set(uids).size, `one uid for the whole sandbox: ${uids.join(', ')}`).to.equal(1);
    return uids[0] as number;
  }

  it('gives each live sandbox its own host uid from the range, and refuses clearly when all are held', async () => {
    const runtime = await newRuntime({ uidRange: { first: TEST_RANGE, count: 2 } });
    const a = await start(runtime, 'sleep');
    const b = await start(runtime, 'sleep');
    const uids = [hostUid(a.sandbox), hostUid(b.sandbox)];
    expect(uids[0]).to.not.equal(uids[1]);
    for (const uid of uids) expect(uid).to.be.within(TEST_RANGE, TEST_RANGE + 1);
    expect((await runtime.status()).details.users).to.deep.include({ perSandbox: true, inUse: 2 });

    const error = await start(runtime, 'sleep').then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(error).to.be.instanceOf(SigilError);
    expect((error as SigilError).code).to.equal('unavailable');
    expect((error as SigilError).message).to.match(/every sandbox uid .* is held/);

    // Released when the sandbox ends: the next one gets that uid.
    await a.sandbox.kill();
    const c = await start(runtime, 'sleep');
    expect(hostUid(c.sandbox)).to.equal(uids[0]);
  });

  it('never hands one uid to two runtimes at once, even two sharing one range', async () => {
    const first = await newRuntime({ uidRange: { first: TEST_RANGE + 2, count: 1 } });
    const second = await newRuntime({ uidRange: { first: TEST_RANGE + 2, count: 1 } });
    const held = await start(first, 'sleep');
    const error = await start(second, 'sleep').then(
      () => undefined,
      (err: unknown) => err,
    );
    expect((error as SigilError | undefined)?.code).to.equal('unavailable');
    await held.sandbox.kill();
    const after = await start(second, 'sleep');
    expect(hostUid(after.sandbox)).to.equal(TEST_RANGE + 2);
  });

  it('keeps a uid free when holding it failed (no descriptor left), so the next claim gets it', async () => {
    const allocator = new UidAllocator({ first: TEST_RANGE + 40, count: 1 });
    const error = await withoutDescriptors(() => allocator.claim()).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect((error as NodeJS.ErrnoException | undefined)?.code).to.equal('EMFILE');
    expect(allocator.inUse).to.equal(0);
    const lease = await allocator.claim();
    expect(lease.uid).to.equal(TEST_RANGE + 40);
    await lease.release();
  });

  it("keeps a killed sandbox's uid held while one of its processes outlives the wait, and frees it once gone", async () => {
    const allocator = new UidAllocator({ first: TEST_RANGE + 41, count: 1 });
    const lease = await allocator.claim();
    const id = randomBytes(4).toString('hex');
    const tag = marker(currentOwner(), id);
    // A process of the sandbox that the kill does not reach in time (outside its process group here;
    // in production, one stuck in the kernel): it carries the sandbox's marker, as they all do.
    const survivor = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1 << 30)', tag], {
      detached: true,
      stdio: 'ignore',
    });
    const child = spawn('sleep', ['1000'], { detached: true });
    try {
      await Promise.all([once(survivor, 'spawn'), once(child, 'spawn')]);
      let released!: () => void;
      const releasedOnce = new Promise<void>((resolve) => (released = resolve));
      const sandbox = new LinuxSandboxProcess(child, {
        id,
        marker: tag,
        outputBytes: 1 << 20,
        graceMs: 10,
        cgroup: undefined,
        memoryPerProcess: false,
        release: () => lease.release().then(released),
      });
      await sandbox.kill();
      const error = await allocator.claim().then(
        () => undefined,
        (err: unknown) => err,
      );
      expect((error as SigilError | undefined)?.code, 'the uid a live process runs as').to.equal(
        'unavailable',
      );

      survivor.kill('SIGKILL');
      await releasedOnce;
      const next = await allocator.claim();
      expect(next.uid).to.equal(TEST_RANGE + 41);
      await next.release();
    } finally {
      survivor.kill('SIGKILL');
      child.kill('SIGKILL');
    }
  });

  it('refuses to start on a uid range that a user of this host already has', async () => {
    const error = await newRuntime({ uidRange: { first: 65534, count: 1 } }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect((error as SigilError | undefined)?.code).to.equal('config_invalid');
    expect((error as Error).message).to.match(/already used on this host: \/etc\/passwd: nobody/);
  });

  it('keeps another sandbox out of a key by the uid alone, with the syscall filter off', async () => {
    const runtime = await newRuntime({ syscallFilter: 'off', uidRange: { first: TEST_RANGE + 3, count: 2 } });
    const canary = 'canary-uid-only';
    const holder = await start<Record<string, unknown>>(runtime, 'keyring', ['store', canary]);
    expect(holder.report.session, 'add_key works without the filter').to.be.an('object');
    const thief = await start<{ listed: string[]; stolen: number[] }>(runtime, 'keyring', ['steal', canary]);
    expect(thief.report).to.deep.include({ listed: [], stolen: [] });
  });

  type AbiReport = { signal?: string; result?: unknown };

  // Both loaders install the same program: each is checked end to end.
  for (const interpreter of ['perl', 'python3'] as const) {
    it(`loaded by ${interpreter}: refuses the keyring, and kills a call through the x32 numbering or the i386 ABI`, async () => {
      const runtime = await newRuntime({ uidRange: { first: TEST_RANGE + 16, count: 8 } }, interpreter);
      expect((await runtime.status()).syscallFilter).to.include({ enforced: true, loader: interpreter });
      const keys = await start<Record<string, unknown>>(runtime, 'keyring', ['store', 'canary']);
      expect(keys.report).to.deep.equal({ session: 'EPERM', user: 'EPERM' });
      const unfiltered = await newRuntime({
        syscallFilter: 'off',
        uidRange: { first: TEST_RANGE + 28, count: 2 },
      });
      for (const abi of ['x32', 'i386']) {
        const { report } = await start<AbiReport>(runtime, 'syscallAbi', [abi]);
        // A kernel built without that ABI (no IA32 emulation, as on some VMs) kills the call itself:
        // then the filter never sees it, and the call must die just as it does unfiltered.
        const { report: kernel } = await start<AbiReport>(unfiltered, 'syscallAbi', [abi]);
        expect(report, abi).to.deep.include({
          signal: kernel.signal === undefined ? 'SIGSYS' : kernel.signal,
        });
      }
    });
  }

  it('says what it enforces: a uid per sandbox from the range, and the filter', async () => {
    const runtime = await newRuntime({ uidRange: { first: TEST_RANGE + 32, count: 4 } });
    const status = await runtime.status();
    expect(status.details.users).to.deep.equal({
      perSandbox: true,
      range: { first: TEST_RANGE + 32, count: 4 },
      inUse: 0,
    });
    expect(status.syscallFilter).to.deep.equal({
      enforced: true,
      arch: 'x86_64',
      denied: [...SERVER_DENIED, 'clone with CLONE_NEW* flags', 'clone3'],
      enosys: ['clone3'],
      otherAbis: 'killed',
      keyring: 'fresh-session',
      loader: 'perl',
    });
  });
});
