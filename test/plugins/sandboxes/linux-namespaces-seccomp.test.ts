import { execFile, spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { expect } from 'chai';
import { isSigilError } from '@sigil/plugin-api';
import { probeReadOnlyPaths, SANDBOX_PROBE_FILE } from '@sigil/plugin-api/kit';
import type { LinuxNamespacesRuntime } from '../../../plugins/sandboxes/linux-namespaces/index.ts';
import {
  CLONE_NEW_NAMESPACE,
  SERVER_DENIED,
  syscallFilter,
} from '../../../plugins/sandboxes/linux-namespaces/seccomp.ts';
import { ProbeRuntimes } from './support.ts';

/**
 * The syscall filter a server runs under (seccomp.ts), probed call by call: from inside a sandbox,
 * where each listed call must be refused; and, since a sandboxed process lacks the capabilities that
 * some calls need anyway (so the kernel would refuse them without any filter), the same program
 * installed on this host as root, where only the filter can refuse them. Run as root.
 */

const run = promisify(execFile);
const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

interface DeniedReport {
  denied: Record<string, number | string>;
  allowed: { fork: string; thread: string };
}

/** What each call answers under the filter: EPERM, but ENOSYS for clone3 (so libc falls back to clone). */
const EXPECTED: Record<string, string> = {
  ...Object.fromEntries(SERVER_DENIED.map((name) => [name, 'EPERM'])),
  'clone with CLONE_NEWUSER': 'EPERM',
  'clone with CLONE_NEWNET': 'EPERM',
  clone3: 'ENOSYS',
};

const probeDenied = async (command: string, args: string[]): Promise<DeniedReport> =>
  JSON.parse(
    (await run(command, [...args, SANDBOX_PROBE_FILE, 'deniedSyscalls'], { encoding: 'utf8' })).stdout,
  );

describe('sandbox-linux-namespaces: the syscall filter', function () {
  this.timeout(60_000);
  let probes: ProbeRuntimes;

  before(() => (probes = new ProbeRuntimes('seccomp')));
  after(async () => {
    await probes.stop();
    probes.remove();
  });

  it('probes every call the filter refuses, and no other', () => {
    // The probe's list and the filter's, so neither gains a call the other does not test.
    expect(Object.keys(EXPECTED)).to.have.members(
      (syscallFilter({ name: 'perl', path: '/usr/bin/perl' })?.status.denied ?? []).flatMap((name) =>
        name === CLONE_NEW_NAMESPACE ? ['clone with CLONE_NEWUSER', 'clone with CLONE_NEWNET'] : [name],
      ),
    );
  });

  describe('inside a sandbox', () => {
    let filtered: DeniedReport;
    let unfiltered: DeniedReport;
    let runtime: LinuxNamespacesRuntime;

    before(async () => {
      runtime = await probes.runtime();
      const bare = await probes.runtime({ syscallFilter: 'off' });
      // python3, which makes the raw system calls, is mounted in.
      const options = { readOnlyPaths: probeReadOnlyPaths() };
      const report = async (each: LinuxNamespacesRuntime) =>
        (await probes.probe<DeniedReport>(each, 'deniedSyscalls', [], options)).report;
      [filtered, unfiltered] = await Promise.all([report(runtime), report(bare)]);
    });

    for (const [name, answer] of Object.entries(EXPECTED)) {
      it(`refuses ${name} (${answer})`, () => {
        expect(filtered.denied[name], `unfiltered: ${String(unfiltered.denied[name])}`).to.equal(answer);
      });
    }

    it('is what refuses them: without it, every call answers otherwise, but those refused for want of a capability', () => {
      // These are refused by the kernel to a process without capabilities, whatever the filter; the
      // test below shows the filter refusing them to root.
      const needCapabilities = [
        'pivot_root',
        'move_mount',
        'fsopen',
        'fsmount',
        'fspick',
        'clone with CLONE_NEWNET',
      ];
      const same = Object.keys(EXPECTED).filter((name) => unfiltered.denied[name] === filtered.denied[name]);
      expect(same).to.satisfy((names: string[]) => names.every((name) => needCapabilities.includes(name)));
    });

    it('keeps fork and threads (clone without namespace flags, clone3 falling back to clone)', () => {
      expect(filtered.allowed).to.deep.equal({ fork: 'ok', thread: 'ok' });
    });

    it('says so in status(): on, every call it refuses, other ABIs killed', async () => {
      expect((await runtime.status()).syscallFilter).to.deep.include({
        enforced: true,
        enosys: ['clone3'],
        otherAbis: 'killed',
        loader: 'perl',
      });
    });

    it('shows nothing of its loader inside (its descriptor: see below)', async () => {
      const { report } = await probes.probe<{ visible: string[] }>(runtime, 'visible', [
        '/usr/bin/perl',
        '/usr/bin/python3',
      ]);
      expect(report.visible).to.deep.equal([]);
    });
  });

  // Root holds every capability here, so the kernel would answer each call on its merits.
  for (const name of ['perl', 'python3'] as const) {
    it(`loaded by ${name} on this host as root, refuses each call that answers otherwise without it`, async () => {
      const filter = syscallFilter({ name, path: `/usr/bin/${name}` });
      const [plain, underFilter] = await Promise.all([
        probeDenied(process.execPath, []),
        probeDenied(`/usr/bin/${name}`, [...(filter?.loaderArgs ?? []), process.execPath]),
      ]);
      for (const [call, answer] of Object.entries(EXPECTED)) {
        expect(plain.denied[call], `${call} without the filter`).to.not.equal(answer);
        expect(underFilter.denied[call], call).to.equal(answer);
      }
      expect(underFilter.allowed).to.deep.equal({ fork: 'ok', thread: 'ok' });
    });
  }

  it("passes on no descriptor the runtime's process inherited without close-on-exec", async () => {
    // A stand-in gateway started with fd 200 open (as a supervisor might leave one), once with the
    // filter's loader (which closes what it did not open) and once without.
    const seen = await Promise.all(
      ['auto', 'off'].map(async (filter) => {
        const child = spawn(
          '/bin/bash',
          [
            '-c',
            'exec 200</dev/null; exec "$0" "$@"',
            process.execPath,
            '--import',
            'tsx',
            join(repoRoot, 'test/fixtures/sandbox/inherited-fd-child.ts'),
            probes.stateDir,
            filter,
          ],
          { cwd: repoRoot, stdio: ['ignore', 'pipe', 'inherit'] },
        );
        let out = '';
        child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
        await new Promise((resolve) => child.once('close', resolve));
        return out.trim().split(' ');
      }),
    );
    expect(seen[0]).to.have.members([
      '/proc/self/fd/0',
      '/proc/self/fd/1',
      '/proc/self/fd/2',
      '/proc/self/fd/3',
    ]);
    expect(seen[1], 'the control: without the loader, it does leak').to.include('/proc/self/fd/200');
  });

  describe('where it cannot be installed', () => {
    let dir: string;
    before(() => {
      dir = mkdtempSync(join(tmpdir(), 'sigil-seccomp-loader-'));
      chmodSync(dir, 0o755);
      // Works on the host, fails inside a sandbox (which has no /usr/bin/perl): a loader that cannot run there.
      mkdirSync(join(dir, 'bin'), { mode: 0o755 });
      writeFileSync(
        join(dir, 'bin', 'perl'),
        '#!/bin/sh\n[ -x /usr/bin/perl ] || exit 3\nexec /usr/bin/perl "$@"\n',
        {
          mode: 0o755,
        },
      );
    });
    after(() => rmSync(dir, { recursive: true, force: true }));

    const missing = { name: 'perl' as const, path: '/sigil-missing/perl' };

    it('auto: starts without it, and status() says it is off and why', async () => {
      const runtime = await probes.runtime({}, missing);
      expect((await runtime.status()).syscallFilter).to.deep.equal({
        enforced: false,
        reason: 'the sandbox syscall filter needs perl on the host (/sigil-missing/perl)',
      });
      const { report } = await probes.probe<{ status: Record<string, string> }>(runtime, 'privileges');
      expect(report.status.Seccomp).to.equal('0');
    });

    it('auto: starts without it when its loader fails the start-up self-test, saying so', async () => {
      const runtime = await probes.runtime({}, { name: 'perl', path: join(dir, 'bin', 'perl') });
      const status = (await runtime.status()).syscallFilter;
      expect(status).to.include({ enforced: false });
      expect((status as { reason: string }).reason).to.match(
        /^the syscall filter failed the start-up self-test: exit code 3/,
      );
    });

    it('seccomp: refuses to start without it, or when its loader fails the self-test', async () => {
      for (const loader of [missing, { name: 'perl' as const, path: join(dir, 'bin', 'perl') }]) {
        const error = await probes.runtime({ syscallFilter: 'seccomp' }, loader).then(
          () => undefined,
          (err: unknown) => err,
        );
        expect(isSigilError(error), `${loader.path}: ${String(error)}`).to.equal(true);
        expect((error as { code: string }).code).to.equal('unavailable');
      }
    });
  });
});
