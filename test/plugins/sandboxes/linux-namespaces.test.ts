import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { expect } from 'chai';
import { pluginEntrySchema } from '../../../core/config/schema.ts';
import { openDatabase } from '../../../core/db/database.ts';
import { ProcessStdioTransport } from '../../../core/mcp/process-transport.ts';
import {
  isSigilError,
  type SandboxExit,
  type SandboxLimits,
  type SandboxRuntimeV2,
  type SandboxSpecV2,
  type SigilError,
} from '@sigil/plugin-api';
import { PluginHost } from '../../../core/plugins/host.ts';
import { configSchema, LinuxNamespacesRuntime } from '../../../plugins/sandboxes/linux-namespaces/index.ts';
import { SANDBOX_PROBE_FILE as probeScript, writableMounts } from '@sigil/plugin-api/kit';
import { markedProcesses, startTime } from '../../../plugins/sandboxes/linux-namespaces/leftovers.ts';
import { builtinPlugins } from '../../../services/builtin-plugins.ts';
import { quietLogger, testCoreServices } from '../../support/kernel.ts';
import { hostSpec, nodeSpec, shellSpec } from './support.ts';

const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const fixtures = join(repoRoot, 'test', 'fixtures', 'sandbox');
/** The sandbox-runtime kit's probe; its directory is the package the sandboxes mount. */
const probePackage = dirname(probeScript);
const MiB = 1024 * 1024;

function newRuntime(
  stateDir: string,
  owner?: string,
  options: { cgroups?: 'auto' | 'off'; cpuQuota?: number; cpuBurst?: number } = {},
  coreToPipe?: boolean,
): LinuxNamespacesRuntime {
  return new LinuxNamespacesRuntime({
    ...(coreToPipe === undefined ? {} : { coreToPipe }),
    // A short grace: the probes that sleep ignore stdin, so kill() comes down to SIGKILL anyway.
    config: configSchema.parse({ stateDir, killGraceMs: 200, ...options }),
    logger: quietLogger(),
    ...(owner ? { owner } : {}),
  });
}

const pidNamespace = (pid: number | 'self') => {
  try {
    return readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    return undefined;
  }
};

/**
 * Host pids of the processes inside a sandbox: its init (which carries the marker and lives in
 * another PID namespace than the launcher's `unshare`) and everything below it.
 */
function sandboxHostPids(id: string): number[] {
  const ours = pidNamespace('self');
  const pids = markedProcesses()
    .filter((p) => p.id === id && pidNamespace(p.pid) !== ours)
    .map((p) => p.pid);
  for (let i = 0; i < pids.length; i++) {
    const pid = pids[i] as number;
    try {
      const children = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim();
      if (children) pids.push(...children.split(' ').map(Number));
    } catch {
      // exited meanwhile
    }
  }
  return [...new Set(pids)];
}

const alive = (pid: number) =>
  existsSync(`/proc/${pid}/stat`) && !/\) Z /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));

/** A loaded 2-core CI machine can take seconds to reap a sandbox: the deadline is generous, the poll short. */
async function eventually(condition: () => boolean, timeoutMs = 15_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (condition()) return true;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  return condition();
}

describe('sandbox-linux-namespaces (sandbox-runtime plugin)', function () {
  this.timeout(30_000);
  let stateDir: string;
  let runtime: LinuxNamespacesRuntime;

  before(async () => {
    stateDir = mkdtempSync(join(tmpdir(), 'sigil-sandbox-test-'));
    chmodSync(stateDir, 0o755); // the sandbox user must be able to reach its root and fstab in here
    runtime = newRuntime(stateDir);
    await runtime.start();
  });
  after(async () => {
    await runtime.stop();
    rmSync(stateDir, { recursive: true, force: true });
  });

  interface ProbeRun<T> {
    exit: SandboxExit;
    report: T;
    stdoutBytes: number;
    stderr: string;
  }

  /** Runs the probe in `mode` inside a fresh sandbox and returns its report (its last stdout line). */
  async function probe<T>(
    mode: string,
    options: { args?: string[]; env?: Record<string, string>; allow?: string[]; limits?: SandboxLimits } = {},
  ): Promise<ProbeRun<T>> {
    const sandbox = await runtime.spawn(
      nodeSpec(probePackage, [probeScript, mode, ...(options.args ?? [])], options),
    );
    let stdout = '';
    let stdoutBytes = 0;
    let stderr = '';
    sandbox.stdout.on('data', (chunk: Buffer) => {
      stdoutBytes += chunk.length;
      if (stdout.length < 4 * MiB) stdout += chunk.toString();
    });
    sandbox.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-8192)));
    const exit = await sandbox.exited;
    const last = stdout.trim().split('\n').pop() ?? '';
    let report: T;
    try {
      report = JSON.parse(last) as T;
    } catch {
      report = undefined as T;
    }
    return { exit, report, stdoutBytes, stderr };
  }

  describe('read-only root filesystem', () => {
    it("mounts everything read-only but /tmp and /proc, whatever the files' owners would allow", async () => {
      const { report } = await probe<{ mounts: string }>('mounts');
      expect(writableMounts(report.mounts)).to.have.members(['/proc', '/tmp']);
    });

    it('has a minimal /dev of its own: no /dev/shm, no terminal, no host devices', async () => {
      const { report } = await probe<{ dev: string[]; shm: string }>('dev');
      expect(report.dev).to.deep.equal([
        'fd',
        'null',
        'random',
        'stderr',
        'stdin',
        'stdout',
        'urandom',
        'zero',
      ]);
      expect(report.shm).to.equal('ENOENT');
    });

    it("mounts a package that lives under the host's /tmp, read-only, above the sandbox's own /tmp", async () => {
      const packageDir = mkdtempSync(join(tmpdir(), 'sigil-sandbox-package-'));
      try {
        chmodSync(packageDir, 0o755);
        copyFileSync(probeScript, join(packageDir, 'probe.cjs'));
        // World-writable on the host, so only the read-only mount can refuse the write (EROFS, not EACCES).
        writeFileSync(join(packageDir, 'data.txt'), 'package data', { mode: 0o666 });
        chmodSync(join(packageDir, 'data.txt'), 0o666);
        const sandbox = await runtime.spawn(
          nodeSpec(packageDir, [join(packageDir, 'probe.cjs'), 'packageFile', join(packageDir, 'data.txt')]),
        );
        let out = '';
        sandbox.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
        sandbox.stderr.resume();
        expect((await sandbox.exited).code).to.equal(0);
        expect(JSON.parse(out)).to.deep.equal({ read: 'package data', write: 'EROFS' });
      } finally {
        rmSync(packageDir, { recursive: true, force: true });
      }
    });
  });

  /** Runs `spec` to its end; its exit and what it printed. */
  async function runToEnd(spec: SandboxSpecV2) {
    const sandbox = await runtime.spawn(spec);
    let stdout = '';
    let stderr = '';
    sandbox.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    sandbox.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    return { exit: await sandbox.exited, stdout, stderr };
  }

  describe('only what it needs of the host', () => {
    it("shows nothing of the host's /usr it was not given: no documentation, headers, compiler or other interpreter", async () => {
      const unneeded = [
        '/usr/share/doc',
        '/usr/include',
        '/usr/lib/gcc',
        '/usr/bin/gcc',
        '/usr/bin/perl',
        '/usr/bin/python3',
      ].filter((path) => existsSync(path));
      expect(unneeded, 'host paths to look for').to.include('/usr/share/doc');
      const { report } = await probe<{ visible: string[] }>('visible', { args: unneeded });
      expect(report.visible).to.deep.equal([]);
    });

    it('runs an executable given in readOnlyPaths with the shared libraries it needs, and no other program', async () => {
      const { exit, stdout, stderr } = await runToEnd(
        shellSpec(['-c', 'find /usr/bin -type f'], {
          readOnlyPaths: ['/usr/bin/find'], // libselinux and libpcre2 come along
        }),
      );
      expect(exit.code, stderr).to.equal(0);
      const programs = stdout.trim().split('\n');
      expect(programs).to.include('/usr/bin/find');
      // What the launch chain runs once inside, the given one, and node if it lives there too.
      const allowed = ['sh', 'setpriv', 'umount', 'prlimit', 'find']
        .map((name) => realpathSync(`/usr/bin/${name}`))
        .concat(realpathSync(process.execPath));
      expect(programs.filter((file) => !allowed.includes(file))).to.deep.equal([]);
    });

    it('runs a script through what its #! line names (#!/usr/bin/env node), with no readOnlyPaths', async () => {
      const { exit, stdout, stderr } = await runToEnd(
        hostSpec({ runtime: 'binary', root: fixtures, command: join(fixtures, 'env-node-script'), args: [] }),
      );
      expect(exit.code, stderr).to.equal(0);
      expect(stdout).to.match(/^ran on node v\d+/);
    });

    it("runs a command that lives in its package under the host's /tmp (the package's directory holds it)", async () => {
      const packageDir = mkdtempSync(join(tmpdir(), 'sigil-sandbox-package-'));
      try {
        chmodSync(packageDir, 0o755);
        copyFileSync(join(fixtures, 'env-node-script'), join(packageDir, 'server'));
        chmodSync(join(packageDir, 'server'), 0o755);
        const { exit, stdout, stderr } = await runToEnd(
          hostSpec({ runtime: 'binary', root: packageDir, command: join(packageDir, 'server'), args: [] }),
        );
        expect(exit.code, stderr).to.equal(0);
        expect(stdout).to.match(/^ran on node v\d+/);
      } finally {
        rmSync(packageDir, { recursive: true, force: true });
      }
    });
  });

  describe('/tmp', () => {
    it('is size-limited', async () => {
      const { report } = await probe<{ written: number; error: string }>('fillTmp', {
        limits: { tmpBytes: 8 * MiB },
      });
      expect(report.written).to.be.at.most(8 * MiB);
      expect(report.error).to.be.oneOf(['ENOSPC', 'EFBIG']);
    });
  });

  describe('privileges', () => {
    it('runs as a non-root user on the host, as the host sees it', async () => {
      const sandbox = await runtime.spawn(nodeSpec(probePackage, [probeScript, 'sleep']));
      try {
        await new Promise((resolve) => sandbox.stdout.once('data', resolve));
        const pids = sandboxHostPids(sandbox.id);
        expect(pids.length, 'sandbox processes found on the host').to.be.at.least(2);
        const range = (await runtime.status()).details.users;
        for (const pid of pids) {
          const status = readFileSync(`/proc/${pid}/status`, 'utf8');
          const [uid, ...others] = /^Uid:\t(.*)$/m.exec(status)?.[1]?.split('\t').map(Number) ?? [];
          if (range.perSandbox)
            expect(uid).to.be.within(range.range.first, range.range.first + range.range.count - 1);
          else expect(uid).to.equal(process.getuid?.());
          expect(others, `uids of host pid ${pid}`).to.deep.equal([uid, uid, uid]);
          expect(/^CapEff:\t(.*)$/m.exec(status)?.[1]).to.equal('0000000000000000');
        }
      } finally {
        await sandbox.kill();
      }
    });
  });

  describe('processes', () => {
    it('has a PID namespace of its own: sees only its processes, cannot signal the host', async () => {
      const { report } = await probe<{ visible: { pid: number; cmdline: string }[]; signalHost: string[] }>(
        'pids',
        { args: [String(process.pid)] },
      );
      expect(report.visible.map((p) => p.pid)).to.include(1);
      expect(report.visible.length).to.be.at.most(3);
      for (const { cmdline } of report.visible) expect(cmdline).to.match(/probe\.cjs pids/);
      expect(report.signalHost).to.deep.equal(['ESRCH']);
    });
  });

  describe('environment and secrets', () => {
    it("gets exactly the spec's environment plus PATH and HOME, and no value of it lands in a file", async () => {
      const canary = `canary-${randomBytes(12).toString('hex')}`;
      const { report } = await probe<{ env: Record<string, string>; canaryInFiles: string[] }>('env', {
        args: [canary],
        env: { API_TOKEN: canary, QUOTED: `it's "quoted"\nand multi-line $HOME` },
      });
      expect(report.env).to.deep.equal({
        API_TOKEN: canary,
        QUOTED: `it's "quoted"\nand multi-line $HOME`,
        // A node outside /usr (the Node 22 pass of CI runs one from node_modules) comes first.
        PATH: dirname(process.execPath).startsWith('/usr/')
          ? '/usr/local/bin:/usr/bin:/bin'
          : `${dirname(process.execPath)}:/usr/local/bin:/usr/bin:/bin`,
        HOME: '/tmp',
      });
      expect(report.canaryInFiles).to.deep.equal([]);
      // And nothing the runtime wrote on the host holds it either.
      const hostFiles: string[] = [];
      const walk = (dir: string) => {
        for (const entry of readdirSync(dir, { withFileTypes: true })) {
          const full = join(dir, entry.name);
          if (entry.isDirectory()) walk(full);
          else if (entry.isFile() && readFileSync(full).includes(canary)) hostFiles.push(full);
        }
      };
      walk(stateDir);
      expect(hostFiles).to.deep.equal([]);
    });

    it('refuses environment names that are not shell identifiers', async () => {
      const refused: Record<string, string>[] = [{ 'BAD-NAME': 'x' }, { PPID: '1' }, { __sigil_env: 'x' }];
      for (const env of refused) {
        const error = await runtime.spawn(nodeSpec(probePackage, [], { env })).then(
          () => undefined,
          (err: Error) => err,
        );
        expect(error?.message, JSON.stringify(env)).to.match(/environment names/);
      }
    });
  });

  describe('lifecycle', () => {
    it('kill() ends the sandbox and every process in it', async () => {
      const sandbox = await runtime.spawn(nodeSpec(probePackage, [probeScript, 'sleep']));
      await new Promise((resolve) => sandbox.stdout.once('data', resolve));
      const pids = sandboxHostPids(sandbox.id);
      expect(pids.length).to.be.at.least(2);
      await sandbox.kill();
      expect((await sandbox.exited).signal).to.equal('SIGKILL');
      expect(pids.filter(alive)).to.deep.equal([]);
    });

    it('dies with its runtime, even when the runtime is killed with SIGKILL', async () => {
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', join(fixtures, 'gateway-child.ts'), stateDir],
        {
          cwd: repoRoot,
          stdio: ['ignore', 'pipe', 'inherit'],
        },
      );
      try {
        const line = await new Promise<string>((resolve, reject) => {
          child.stdout.once('data', (chunk: Buffer) => resolve(chunk.toString()));
          child.once('exit', () => reject(new Error('the stand-in gateway exited early')));
        });
        const { id } = JSON.parse(line) as { id: string };
        const pids = sandboxHostPids(id);
        expect(pids.length, 'sandboxed processes of the child gateway').to.be.at.least(2);
        child.kill('SIGKILL');
        expect(
          await eventually(() => pids.filter(alive).length === 0),
          'sandbox outlived its runtime',
        ).to.equal(true);
      } finally {
        child.kill('SIGKILL');
      }
    });

    // Twice: with cgroups the cgroup alone would find the processes; without, only their markers can.
    for (const cgroups of ['auto', 'off'] as const) {
      it(`reapLeftovers() kills the sandboxes, cgroups and state of a runtime that is gone (cgroups: ${cgroups})`, async () => {
        // A runtime standing in for a gateway that died without its sandboxes dying (the one window
        // PR_SET_PDEATHSIG leaves): its owner names a process that ends just before the reap. Not a
        // process that never existed: every runtime on the host reaps at its start, and the test
        // files in the other mocha worker start many, which would reap this one first.
        const standIn = spawn('sleep', ['600'], { stdio: 'ignore' });
        const standInGone = new Promise((resolve) => standIn.once('exit', resolve));
        try {
          const deadOwner = `${standIn.pid}.${startTime(standIn.pid as number)}`;
          const orphaned = newRuntime(stateDir, deadOwner, { cgroups });
          const sandbox = await orphaned.spawn(nodeSpec(probePackage, [probeScript, 'sleep']));
          await new Promise((resolve) => sandbox.stdout.once('data', resolve));
          const pids = sandboxHostPids(sandbox.id);
          const ownDirs = () => readdirSync(stateDir).filter((entry) => entry.startsWith(`${deadOwner}-`));
          expect(ownDirs()).to.have.lengthOf(1);
          const cgroup = `/sys/fs/cgroup/memory/sigil/${deadOwner}-${sandbox.id}`;
          if (cgroups === 'auto' && (await runtime.status()).limits === 'cgroup-v1')
            expect(existsSync(cgroup)).to.equal(true);

          standIn.kill('SIGKILL');
          await standInGone;
          const report = await runtime.reapLeftovers();
          expect(report.processes).to.be.at.least(1);
          expect(report.stateDirs).to.be.at.least(1); // also the killed stand-in gateway's, if it ran before
          const exit = await sandbox.exited;
          expect(exit.signal).to.not.equal(null);
          expect(await eventually(() => pids.filter(alive).length === 0)).to.equal(true);
          // The state dir and cgroup go once the sandbox's last process is gone, which on a loaded
          // machine can be after `exited` settles.
          expect(await eventually(() => ownDirs().length === 0)).to.equal(true);
          expect(await eventually(() => !existsSync(cgroup))).to.equal(true);
        } finally {
          standIn.kill('SIGKILL');
        }
      });
    }

    it('sets the same limits through prlimit when core dumps go to a pipe helper (core limit: 1 byte)', async () => {
      const piped = newRuntime(stateDir, undefined, {}, true);
      try {
        const sandbox = await piped.spawn(
          // Not /usr as the package: prlimit must be there because the chain needs it, not by chance.
          shellSpec(
            [
              '-c',
              'ulimit -c; ulimit -p; ulimit -t; while read -r line; do case $line in "Max core file size"*) echo "$line";; esac; done < /proc/self/limits',
            ],
            { limits: { pids: 99, cpuSeconds: 7 } },
          ),
        );
        let out = '';
        sandbox.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
        sandbox.stderr.resume();
        expect((await sandbox.exited).code).to.equal(0);
        const [core, pids, cpu, coreLine] = out.trim().split('\n');
        expect([core, pids, cpu]).to.deep.equal(['0', '99', '7']); // dash shows the core limit in blocks
        expect(coreLine).to.match(/^Max core file size\s+1\s+1\s+bytes/);
      } finally {
        await piped.stop();
      }
    });

    it("lets a sandbox bank a share of its CPU quota and spend it at once (cpuBurst, cgroup v1's cpu.cfs_burst_us)", async () => {
      const cpuFiles = async (options: { cpuBurst?: number }) => {
        const limited = newRuntime(stateDir, undefined, { cpuQuota: 1.5, ...options });
        try {
          // Kept running by its open stdin while the files are read.
          const sandbox = await limited.spawn(shellSpec(['-c', 'echo up; read -r line']));
          sandbox.stderr.resume();
          await new Promise((resolve) => sandbox.stdout.once('data', resolve));
          const cgroup = `/sys/fs/cgroup/cpu/sigil/${limited.owner}-${sandbox.id}`;
          const read = (file: string) => readFileSync(join(cgroup, file), 'utf8').trim();
          const files = { quota: read('cpu.cfs_quota_us'), burst: read('cpu.cfs_burst_us') };
          sandbox.stdin.end();
          await sandbox.exited;
          return files;
        } finally {
          await limited.stop();
        }
      };
      const status = await runtime.status();
      expect(status.limits, 'this host gives sandboxes cgroup v1 limits').to.equal('cgroup-v1');
      expect(status.details.cpu, 'status() tells the quota and the burst').to.deep.equal({
        quota: 1,
        burst: 1,
      });
      expect(await cpuFiles({})).to.deep.equal({ quota: '150000', burst: '150000' });
      expect(await cpuFiles({ cpuBurst: 0.5 })).to.deep.equal({ quota: '150000', burst: '75000' });
      expect(await cpuFiles({ cpuBurst: 0 })).to.deep.equal({ quota: '150000', burst: '0' });
    });

    it('refuses to start on a state dir that others could write to (they would choose what sandboxes mount)', async () => {
      const shared = mkdtempSync(join(tmpdir(), 'sigil-sandbox-shared-'));
      try {
        chmodSync(shared, 0o777);
        const error = await newRuntime(shared)
          .start()
          .then(
            () => undefined,
            (err: Error) => err,
          );
        expect(error?.message).to.match(/writable by it alone/);
      } finally {
        rmSync(shared, { recursive: true, force: true });
      }
    });

    it('refuses a spec it cannot honour before starting anything', async () => {
      const binary = (command: string) =>
        hostSpec({ runtime: 'binary', root: probePackage, command, args: [] });
      for (const [spec, message, code] of [
        [nodeSpec('relative/dir', []), /launch.root: must be an absolute path/, 'invalid_request'],
        [nodeSpec(probePackage, [], { allow: ['example.com'] }), /host:port/, 'invalid_request'],
        [binary(join(probePackage, 'no-such-command')), /not an executable/, 'invalid_request'],
        [binary('/bin/sh'), /launch.command: must be inside launch.root/, 'invalid_request'],
        [
          hostSpec({ runtime: 'binary', root: probePackage, args: [] }),
          /names its command/,
          'invalid_request',
        ],
        [
          hostSpec({ runtime: 'node', root: probePackage, command: process.execPath, args: [] }),
          /the sandbox supplies the interpreter/,
          'invalid_request',
        ],
        [
          {
            launch: { kind: 'image', image: `sigil/x@sha256:${'0'.repeat(64)}`, args: [] },
            env: {},
            networkAllowList: [],
          },
          /runs host programs only .* Docker sandbox/,
          'unavailable',
        ],
      ] as const) {
        const error = await runtime.spawn(spec as SandboxSpecV2).then(
          () => undefined,
          (err: unknown) => err,
        );
        expect(isSigilError(error), JSON.stringify(spec)).to.equal(true);
        expect((error as SigilError).message, JSON.stringify(spec)).to.match(message);
        expect((error as SigilError).code, JSON.stringify(spec)).to.equal(code);
      }
    });

    it('refuses a path it needs that is not on the host with unavailable (path_missing), naming it', async () => {
      const missing = join(fixtures, 'missing');
      for (const spec of [
        { root: missing, readOnlyPaths: [] },
        { root: probePackage, readOnlyPaths: [join(missing, 'libgone.so')] },
      ]) {
        const error = await runtime
          .spawn(nodeSpec(spec.root, [], { readOnlyPaths: spec.readOnlyPaths }))
          .then(
            () => undefined,
            (err: unknown) => err,
          );
        expect(isSigilError(error), String(error)).to.equal(true);
        const { code, details, message } = error as SigilError;
        expect({ code, details }).to.deep.equal({
          code: 'unavailable',
          details: { reason: 'path_missing', path: spec.readOnlyPaths[0] ?? missing },
        });
        expect(message).to.include('does not exist on the host');
      }
    });
  });

  describe('a real MCP server', () => {
    it('runs @modelcontextprotocol/server-everything: the SDK client lists its tools and calls echo', async () => {
      const sandbox = await runtime.spawn(
        nodeSpec(join(repoRoot, 'node_modules'), [
          join(repoRoot, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js'),
          'stdio',
        ]),
      );
      const client = new Client({ name: 'sandbox-test', version: '1.0.0' });
      await client.connect(new ProcessStdioTransport(sandbox));
      try {
        const { tools } = await client.listTools();
        expect(tools.map((tool) => tool.name)).to.include('echo');
        const result = await client.callTool({ name: 'echo', arguments: { message: 'from the sandbox' } });
        expect(JSON.stringify(result.content)).to.include('from the sandbox');
      } finally {
        await client.close();
      }
      expect((await sandbox.exited).code).to.not.equal(undefined);
    });

    describe('from a package under a directory the sandbox user cannot search (a clone in a mode-700 home)', () => {
      let home: string;
      let server: string;
      let neighbour: string;
      // The server's node_modules links to the repository's, which it reaches read-only too.
      const readOnlyPaths = () => [join(repoRoot, 'node_modules')];
      const serverSpec = (root = server) =>
        nodeSpec(root, [join(root, 'server.mjs')], { readOnlyPaths: readOnlyPaths() });
      before(() => {
        home = mkdtempSync(join(tmpdir(), 'sigil-private-home-'));
        chmodSync(home, 0o700);
        server = join(home, 'sigil', 'probe-server');
        mkdirSync(server, { recursive: true, mode: 0o755 });
        chmodSync(join(home, 'sigil'), 0o755);
        for (const file of ['package.json', 'server.mjs'])
          copyFileSync(join(repoRoot, 'test', 'fixtures', 'mcp', 'probe-package', file), join(server, file));
        symlinkSync(join(repoRoot, 'node_modules'), join(server, 'node_modules'));
        symlinkSync('/bin/sh', join(server, 'sh'));
        neighbour = join(home, 'sigil', 'another-package');
        mkdirSync(neighbour, { mode: 0o755 });
        writeFileSync(join(neighbour, 'index.js'), '');
      });
      after(() => rmSync(home, { recursive: true, force: true }));

      it('runs it: the SDK client lists its tools and calls echo, and the host mount table never sees the bind', async () => {
        const sandbox = await runtime.spawn(serverSpec());
        const client = new Client({ name: 'sandbox-test', version: '1.0.0' });
        await client.connect(new ProcessStdioTransport(sandbox));
        try {
          const { tools } = await client.listTools();
          expect(tools.map((tool) => tool.name)).to.include('echo');
          const result = await client.callTool({
            name: 'echo',
            arguments: { message: 'from a private home' },
          });
          expect(JSON.stringify(result.content)).to.include('from a private home');
          // Lent in a mount namespace of the sandbox's own, never on the host.
          expect(readFileSync('/proc/self/mountinfo', 'utf8')).to.not.include(stateDir);
        } finally {
          await client.close();
        }
        await sandbox.exited;
        const left = readdirSync(stateDir, { recursive: true }).map(String);
        expect(left.filter((path) => path.includes('.lent'))).to.deep.equal([]);
      });

      it('keeps the package read-only and shows nothing else of the private directory', async () => {
        const sandbox = await runtime.spawn(
          hostSpec(
            {
              runtime: 'binary',
              root: server,
              command: join(server, 'sh'),
              args: [
                '-c',
                '{ true > "$1/written"; } 2>/dev/null && echo package-writable || echo package-read-only; ' +
                  '[ -e "$1/server.mjs" ] && echo package-visible; ' +
                  '[ -e "$2" ] && echo neighbour-visible || echo neighbour-hidden',
                'sh',
                server,
                neighbour,
              ],
            },
            { readOnlyPaths: readOnlyPaths() },
          ),
        );
        let out = '';
        sandbox.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
        sandbox.stderr.resume();
        expect((await sandbox.exited).code).to.equal(0);
        expect(out.split('\n').filter(Boolean)).to.deep.equal([
          'package-read-only',
          'package-visible',
          'neighbour-hidden',
        ]);
        expect(existsSync(join(server, 'written'))).to.equal(false);
      });

      it('still refuses a package directory that itself shuts the sandbox user out', async () => {
        const closed = join(home, 'sigil', 'closed-package');
        mkdirSync(closed, { mode: 0o700 });
        const error = await runtime.spawn(serverSpec(closed)).then(
          () => undefined,
          (err: Error) => err,
        );
        expect(error?.message).to.match(/closed-package is not reachable by the sandbox user/);
      });
    });
  });

  it('loads as the built-in plugin "sandbox-linux-namespaces" of kind sandbox-runtime', async () => {
    const db = await openDatabase({ url: ':memory:' });
    const host = new PluginHost({
      builtins: builtinPlugins,
      core: testCoreServices(db),
      logger: quietLogger(),
      baseDir: repoRoot,
    });
    try {
      await host.load([
        pluginEntrySchema.parse({ resolve: 'sandbox-linux-namespaces', options: { stateDir } }),
      ]);
      expect(host.list()[0]).to.include({
        name: 'sandbox-linux-namespaces',
        kind: 'sandbox-runtime',
        specVersion: 'v2',
      });
      await host.start();
      const sandbox = await (host.one('sandbox-runtime') as SandboxRuntimeV2).spawn(
        shellSpec(['-c', 'echo hello']),
      );
      let out = '';
      sandbox.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      expect((await sandbox.exited).code).to.equal(0);
      expect(out).to.equal('hello\n');
    } finally {
      await host.stop();
      await db.destroy();
    }
  });
});
