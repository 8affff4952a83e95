import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  watch,
} from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { expect } from 'chai';
import { isSigilError, type SandboxSpecV2, type SandboxStatus, type SigilError } from '@sigil/plugin-api';
import { SANDBOX_PROBE_FILE, writableMounts } from '@sigil/plugin-api/kit';
import type { DockerRuntime } from '../../../plugins/sandboxes/docker/index.ts';
import { DENIED_SYSCALLS } from '../../../plugins/sandboxes/docker/seccomp-profile.ts';
import { builtinPlugins } from '../../../services/builtin-plugins.ts';
import { ENGINE_DIR, IMAGE_PATHS, ociLayoutOf, startRegistry } from '../../support/docker.ts';
import { fixturePath, repoPath } from '../../support/paths.ts';
import {
  callThrough,
  childGateway,
  containerEvent,
  containerExists,
  DockerProbes,
  probeSpec,
  runProbe,
  startProbe,
  type ProbeRun,
} from './docker-support.ts';

const MiB = 1024 * 1024;

/** A listener on this host's loopback that echoes what it gets. */
function echoServer(): Promise<Server> {
  return new Promise((resolve) => {
    const server = createServer((socket) => socket.pipe(socket).on('error', () => undefined));
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}
const target = (server: Server) => `127.0.0.1:${(server.address() as { port: number }).port}`;

/** Resolves true once `path` is gone (watched, not polled), or false after `timeoutMs`. */
function removal(path: string, timeoutMs = 30_000): Promise<boolean> {
  return new Promise((resolve) => {
    const watcher = watch(dirname(path));
    const done = (gone: boolean) => {
      watcher.close();
      clearTimeout(timer);
      resolve(gone);
    };
    const timer = setTimeout(() => done(!existsSync(path)), timeoutMs);
    watcher.on('change', () => {
      if (!existsSync(path)) done(true);
    });
  });
}

async function rejection(promise: Promise<unknown>): Promise<SigilError> {
  try {
    await promise;
  } catch (error) {
    if (isSigilError(error)) return error;
    throw error;
  }
  throw new Error('expected a rejection');
}

/** The plain-Python MCP server of the fixtures, as a host program of the python image. */
function pythonServer(env: Record<string, string> = {}): SandboxSpecV2 {
  const root = dirname(fixturePath('mcp', 'python-echo', 'server.py'));
  return {
    launch: { kind: 'host', runtime: 'python', root, args: [join(root, 'server.py')] },
    env,
    networkAllowList: [],
  };
}

describe('sandbox-docker (sandbox-runtime v2 plugin, on a real Docker engine)', function () {
  this.timeout(120_000);
  const probes = new DockerProbes();
  let runtime: DockerRuntime;

  before(async () => {
    await probes.start();
    runtime = await probes.runtime();
  });
  after(() => probes.stop());

  const probe = <T>(mode: string, options: Parameters<typeof runProbe>[2] = {}): Promise<ProbeRun<T>> =>
    runProbe<T>(runtime, mode, options);

  it('is a builtin plugin, sandbox-docker, of kind sandbox-runtime v2', async () => {
    const manifest = (
      (await builtinPlugins['sandbox-docker']!()) as {
        default: { kind: string; specVersion: string; name: string };
      }
    ).default;
    expect([manifest.kind, manifest.specVersion, manifest.name]).to.deep.equal([
      'sandbox-runtime',
      'v2',
      'sandbox-docker',
    ]);
  });

  describe('each constraint, probed from inside a container', () => {
    it('writes nowhere but /tmp: / is read-only (EROFS), and the rest is memory devices', async () => {
      const { report } = await probe<{ writable: string[]; rootWrite: string; mounts: string }>('fs');
      expect(report.rootWrite).to.equal('EROFS');
      // The probe leaves out null, zero, full, random and urandom (/proc/keys and /proc/timer_list
      // are /dev/null bound over the real files), and /dev/tty, which opens only with a terminal.
      expect(report.writable).to.deep.equal(['/tmp']);
    });

    it('mounts everything but /tmp and /proc read-only, /dev and the cgroup tmpfs included; no ptys, no /dev/shm', async () => {
      const { report } = await probe<{ mounts: string }>('mounts');
      expect(writableMounts(report.mounts).sort()).to.deep.equal(['/proc', '/tmp']);
      const dev = await probe<{ dev: string[]; shm: string }>('dev');
      // What runc makes in the read-only /dev, the pty multiplexer's link left pointing nowhere.
      expect(dev.report.dev).to.deep.equal(
        [
          'fd',
          'full',
          'null',
          'ptmx',
          'random',
          'stderr',
          'stdin',
          'stdout',
          'tty',
          'urandom',
          'zero',
        ].sort(),
      );
      expect(dev.report.shm).to.equal('ENOENT');
    });

    it('mounts /tmp noexec: neither a binary nor a script copied there runs', async () => {
      const { report } = await probe<{ binary: string; script: string; tmpWritable: boolean }>('tmpExec');
      expect(report).to.deep.equal({ binary: 'EACCES', script: 'EACCES', tmpWritable: true });
    });

    it('sizes /tmp by limits.tmpBytes', async () => {
      const { report } = await probe<{ written: number; error: string }>('fillTmp', {
        limits: { tmpBytes: 4 * MiB },
      });
      expect(report.written).to.be.at.most(4 * MiB);
      expect(['ENOSPC', 'EFBIG']).to.include(report.error);
    });

    it('holds no capability, sets no_new_privs and the seccomp filter, and runs as a non-root uid of the range', async () => {
      interface Privileges {
        status: Record<string, string>;
        uid: number;
        setuidRoot: string;
        nestedUserNamespace: { status: number };
      }
      const { report } = await probe<Privileges>('privileges');
      for (const set of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'])
        expect(report.status[set], set).to.equal('0000000000000000');
      expect(report.status.NoNewPrivs).to.equal('1');
      expect(report.status.Seccomp).to.equal('2');
      expect(report.uid).to.be.within(0x70010000, 0x70010000 + 65535);
      expect(report.setuidRoot).to.equal('EPERM');
      expect(report.nestedUserNamespace.status).to.not.equal(0);
    });

    it('gives two live containers two uids', async () => {
      const first = await startProbe<{ pid: number }>(runtime, 'sleep');
      const second = await startProbe<{ pid: number }>(runtime, 'sleep');
      try {
        const uid = async (id: string) => (await probes.engine.docker.getContainer(id).inspect()).Config.User;
        const [a, b] = await Promise.all([uid(first.sandbox.containerId), uid(second.sandbox.containerId)]);
        expect(a).to.match(/^\d+:\d+$/);
        expect(a).to.not.equal(b);
      } finally {
        await Promise.all([first.sandbox.kill(), second.sandbox.kill()]);
      }
    });

    it('refuses ptrace, mount, umount, pivot_root, unshare, setns, bpf, perf_event_open, userfaultfd, kexec, modules, namespace clones, io_uring', async () => {
      const { report } = await probe<{
        denied: Record<string, string | number>;
        allowed: Record<string, string>;
      }>('deniedSyscalls');
      expect(Object.keys(report.denied)).to.have.length.above(10);
      // clone3 answers ENOSYS, so libc falls back to clone, whose flags the filter sees.
      for (const [name, result] of Object.entries(report.denied))
        expect(result, name).to.equal(name === 'clone3' ? 'ENOSYS' : 'EPERM');
      expect(report.allowed).to.deep.equal({ fork: 'ok', thread: 'ok' });
    });

    it('closes the kernel keyring: keyctl answers EPERM, and nothing of another container is listed', async () => {
      const { report } = await probe<{ listed: string[]; stolen: number[]; keyctl: string }>('keyring', {
        args: ['steal', 'sigil-canary'],
      });
      expect(report).to.deep.equal({ listed: [], stolen: [], keyctl: 'EPERM' });
    });

    for (const abi of ['x32', 'i386']) {
      it(`kills a process making a system call through the ${abi} ABI (SIGSYS, or as a kernel without it does)`, async () => {
        const { report } = await probe<{ signal: string }>('syscallAbi', { args: [abi] });
        // A kernel built without that ABI (no IA32 emulation, as on some VMs) kills the call itself:
        // then the filter never sees it, and the call must die just as it does unfiltered on this
        // host's kernel, which the container shares.
        const unfiltered = spawnSync(process.execPath, [SANDBOX_PROBE_FILE, 'syscallAbi', abi], {
          encoding: 'utf8',
        });
        const kernel = JSON.parse(unfiltered.stdout) as { signal?: string };
        expect(report.signal).to.equal(kernel.signal ?? 'SIGSYS');
      });
    }

    it('sees only its own processes', async () => {
      const { report } = await probe<{ visible: { pid: number; cmdline: string }[]; signalHost: string[] }>(
        'pids',
        {
          args: [String(process.pid)],
        },
      );
      // The image's sh as PID 1 (the container's init), and the probe.
      expect(report.visible.map((p) => p.pid)).to.deep.equal([1, report.visible[1]?.pid]);
      expect(report.visible[0]?.cmdline).to.match(/^\/bin\/sh -c /);
      expect(report.visible[1]?.cmdline).to.include('sandbox-probe.cjs pids');
      expect(report.signalHost[0]).to.not.equal('ok');
    });

    it('reaches no network with an empty allow-list, not even a listener on the host', async () => {
      const server = await echoServer();
      try {
        const { report } = await probe<{ results: { direct: string; proxy: { status: unknown } }[] }>('net', {
          args: [target(server), '10.0.0.1:80'],
        });
        expect(report.results.map((r) => r.direct)).to.deep.equal(['ECONNREFUSED', 'ENETUNREACH']);
        expect(report.results[0]?.proxy.status).to.equal('no HTTPS_PROXY');
      } finally {
        server.close();
      }
    });

    it('reaches an allow-listed host:port through HTTPS_PROXY, and nothing else, directly or through the proxy', async () => {
      const [allowed, other] = await Promise.all([echoServer(), echoServer()]);
      try {
        const { report } = await probe<{
          results: { target: string; direct: string; proxy: { status: number | string; echo?: string } }[];
          proxyVariables: string[];
        }>('net', { args: [target(allowed), target(other), '10.0.0.1:80'], allow: [target(allowed)] });
        const [yes, no, outside] = report.results;
        expect(yes?.proxy).to.deep.equal({ status: 200, echo: 'ping' });
        expect(no?.proxy.status).to.equal(403);
        expect(outside?.proxy.status).to.equal(403);
        // Loopback is the forwarder's namespace: the host's listeners are not on it.
        for (const result of report.results) expect(result.direct).to.not.equal('connected');
        expect(report.proxyVariables[1]).to.equal('http://127.0.0.1:3128');
      } finally {
        allowed.close();
        other.close();
      }
    });

    it('holds at most limits.egressConnections tunnels at once', async () => {
      const FLOOD = 40;
      const server = await echoServer();
      const { sandbox, report } = await startProbe<{ established: number; outcomes: Record<string, number> }>(
        runtime,
        'egressFlood',
        { args: [target(server), String(FLOOD)], allow: [target(server)], limits: { egressConnections: 8 } },
      );
      try {
        // The rest are refused: a 503, or (when the proxy closes before the forwarder wrote the
        // request) a close; on a loaded machine every refusal may be a close (CI saw 8 × 200, 32 closed).
        const outcomes = JSON.stringify(report.outcomes);
        expect(report.established, outcomes).to.be.within(1, 8);
        expect(report.outcomes['200']).to.equal(report.established);
        const refused = (report.outcomes['503'] ?? 0) + (report.outcomes['closed'] ?? 0);
        expect(refused, outcomes).to.equal(FLOOD - report.established);
      } finally {
        await sandbox.kill();
        server.close();
      }
    });
  });

  describe('environment and secrets', () => {
    it("is the spec's env plus PATH and HOME; values with quotes and newlines arrive intact", async () => {
      const env = {
        SIGIL_SECRET: `canary-${randomBytes(8).toString('hex')}`,
        QUOTED: `it's "quoted"\n$HOME \`x\``,
      };
      const { report } = await probe<{ env: Record<string, string>; canaryInFiles: string[] }>('env', {
        args: [env.SIGIL_SECRET],
        env,
      });
      expect(report.env).to.deep.equal({
        ...env,
        PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
        HOME: '/tmp',
      });
      expect(report.canaryInFiles).to.deep.equal([]);
    });

    it('passes secrets over stdin: neither docker inspect nor the engine’s state on disk holds them', async () => {
      const secret = `canary-${randomBytes(12).toString('hex')}`;
      const { sandbox } = await startProbe(runtime, 'sleep', { env: { SIGIL_SECRET: secret } });
      try {
        const inspected = JSON.stringify(
          await probes.engine.docker.getContainer(sandbox.containerId).inspect(),
        );
        expect(inspected).to.not.include(secret);
        const stateDir = join(ENGINE_DIR, 'data', 'containers', sandbox.containerId);
        for (const file of readdirSync(stateDir, { recursive: true }).map(String)) {
          const path = join(stateDir, file);
          try {
            expect(readFileSync(path, 'utf8'), path).to.not.include(secret);
          } catch (error) {
            if ((error as NodeJS.ErrnoException).code !== 'EISDIR') throw error;
          }
        }
      } finally {
        await sandbox.kill();
      }
    });

    it("with secretDelivery 'env', the value is the container's Env (the documented weaker mode)", async () => {
      const envRuntime = await probes.runtime({ secretDelivery: 'env' });
      const secret = `canary-${randomBytes(12).toString('hex')}`;
      const { sandbox } = await startProbe(envRuntime, 'sleep', { env: { SIGIL_SECRET: secret } });
      try {
        const inspected = await probes.engine.docker.getContainer(sandbox.containerId).inspect();
        expect(inspected.Config.Env).to.include(`SIGIL_SECRET=${secret}`);
      } finally {
        await sandbox.kill();
      }
    });
  });

  describe('limits', () => {
    it('ends a container allocating past memoryBytes, and exited says limit: memory', async () => {
      const run = await probe('memory', { args: ['2048'], limits: { memoryBytes: 128 * MiB } });
      expect(run.report).to.equal(undefined);
      expect(run.exit.limit).to.equal('memory');
    });

    it('ends a process spinning past cpuSeconds with SIGXCPU, and exited says limit: cpu', async () => {
      const run = await probe('cpu', { limits: { cpuSeconds: 1 } });
      expect(run.exit).to.include({ limit: 'cpu', signal: 'SIGXCPU' });
    });

    it('keeps a fork bomb within pids', async () => {
      const run = await probe<{ peak: number }>('forkBomb', { args: ['1500'], limits: { pids: 48 } });
      expect(run.report.peak).to.be.at.most(48);
    });

    it('cuts a flood off at outputBytes and kills it, and exited says limit: output', async () => {
      const run = await probe('flood', { limits: { outputBytes: MiB } });
      expect(run.stdoutBytes).to.be.at.most(MiB);
      expect(run.exit.limit).to.equal('output');
    });

    it('sets RLIMIT_NOFILE to openFiles, soft and hard', async () => {
      const { report } = await probe<{ soft: number; hard: number; opened: number }>('openFiles', {
        limits: { openFiles: 128 },
      });
      expect([report.soft, report.hard]).to.deep.equal([128, 128]);
      expect(report.opened).to.be.below(128);
    });
  });

  describe('MCP over stdio, with the official SDK client', () => {
    it('runs @modelcontextprotocol/server-everything from its install root (a host program in the node image)', async () => {
      // The install root is the repository's node_modules (its real path: a worktree links it).
      const root = realpathSync(repoPath('node_modules'));
      const sandbox = await runtime.spawn({
        launch: {
          kind: 'host',
          runtime: 'node',
          root,
          args: [join(root, '@modelcontextprotocol/server-everything/dist/index.js'), 'stdio'],
        },
        env: {},
        networkAllowList: [],
        labels: { server: 'everything', caller: 'test' },
      });
      const labels = (await probes.engine.docker.getContainer(sandbox.containerId).inspect()).Config.Labels;
      expect(labels).to.include({ 'io.sigil.label.server': 'everything', 'io.sigil.sandbox.role': 'server' });
      expect(labels['io.sigil.sandbox.instance']).to.equal(runtime.owner.instance);
      const { tools, text } = await callThrough(sandbox, 'echo', { message: 'from a container' });
      expect(tools).to.include('echo');
      expect(text).to.include('from a container');
      await sandbox.exited;
      expect(await containerExists(probes.engine.docker, sandbox.containerId)).to.equal(false);
    });

    it('runs a Python server as a host program in the python image, with a secret it can read', async () => {
      const sandbox = await runtime.spawn(pythonServer({ API_TOKEN: 'token-from-stdin' }));
      const { text } = await callThrough(sandbox, 'env', { name: 'API_TOKEN' });
      expect(text).to.equal('token-from-stdin');
    });

    it('runs a digest-pinned image that the engine lacks, loaded from its OCI layout', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'sigil-layout-'));
      try {
        const { layout, digest } = await ociLayoutOf(probes.engine.docker, probes.engine.images.node, dir);
        const configDigest = JSON.parse(
          readFileSync(join(layout, 'blobs', 'sha256', digest.slice(7)), 'utf8'),
        ).config.digest as string;
        // The engine knows the image by its tag only: the pinned name resolves through the layout.
        const image = `sigil-test/layout@${digest}`;
        const sandbox = await runtime.spawn({
          launch: {
            kind: 'image',
            image,
            layout,
            entrypoint: ['node'],
            args: [IMAGE_PATHS.everything, 'stdio'],
          },
          env: {},
          networkAllowList: [],
        });
        const inspected = await probes.engine.docker.getContainer(sandbox.containerId).inspect();
        expect(inspected.Image).to.equal(configDigest);
        const { text } = await callThrough(sandbox, 'echo', { message: 'from an image' });
        expect(text).to.include('from an image');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it('pulls a digest-pinned image that the engine lacks from its registry (a real OCI distribution registry)', async () => {
      const registry = await startRegistry();
      try {
        const image = await registry.pushAndForget(
          probes.engine.docker,
          probes.engine.images.python,
          'sigil-test/python',
        );
        const sandbox = await runtime.spawn({
          launch: { kind: 'image', image, entrypoint: ['python3'], args: [IMAGE_PATHS.pythonServer] },
          env: {},
          networkAllowList: [],
        });
        const { text } = await callThrough(sandbox, 'echo', { message: 'pulled by digest' });
        expect(text).to.equal('pulled by digest');
        expect((await probes.engine.docker.getImage(image).inspect()).RepoDigests).to.include(image);
      } finally {
        await registry.stop();
      }
    });

    it('runs an image without a shell through the engine’s attach, and refuses secrets over stdin to it', async () => {
      const dir = mkdtempSync(join(tmpdir(), 'sigil-layout-'));
      try {
        const { layout, digest } = await ociLayoutOf(probes.engine.docker, probes.engine.bare, dir);
        const launch = {
          kind: 'image' as const,
          image: `sigil-test/bare@${digest}`,
          layout,
          entrypoint: ['/usr/bin/node'],
          args: [IMAGE_PATHS.everything, 'stdio'],
        };
        const sandbox = await runtime.spawn({ launch, env: {}, networkAllowList: [] });
        const { Config } = await probes.engine.docker.getContainer(sandbox.containerId).inspect();
        expect(Config.OpenStdin).to.equal(true); // attached, not piped
        const { text } = await callThrough(sandbox, 'echo', { message: 'no shell' });
        expect(text).to.include('no shell');
        const refused = await rejection(runtime.spawn({ launch, env: { TOKEN: 'x' }, networkAllowList: [] }));
        expect(refused.details?.reason).to.equal('image_without_shell');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it("with stdio 'attach', carries MCP and the environment over the engine's attach too", async () => {
      const attached = await probes.runtime({ stdio: 'attach' });
      const sandbox = await attached.spawn(pythonServer({ API_TOKEN: 'token over attach' }));
      const { text } = await callThrough(sandbox, 'env', { name: 'API_TOKEN' });
      expect(text).to.equal('token over attach');
      const again = await attached.spawn(pythonServer());
      again.stdout.resume();
      again.stdin.end();
      expect(await again.exited).to.deep.equal({ code: 0, signal: null });
    });

    it('ends when its stdin ends (no writer is left on its pipe)', async () => {
      const sandbox = await runtime.spawn(pythonServer());
      sandbox.stdout.resume();
      sandbox.stdin.end();
      expect(await sandbox.exited).to.deep.equal({ code: 0, signal: null });
    });
  });

  describe('kill, orphans and leftovers', () => {
    it('kill() ends the container and removes it; exited says SIGKILL', async () => {
      const { sandbox } = await startProbe(runtime, 'sleep');
      await sandbox.kill();
      const exit = await sandbox.exited;
      expect(exit.signal).to.equal('SIGKILL');
      expect(await containerExists(probes.engine.docker, sandbox.containerId)).to.equal(false);
    });

    const options = () => ({
      engine: { socketPath: probes.engine.socketPath },
      images: probes.engine.images,
      stateDir: '/tmp/sigil-docker-test',
    });

    /** The state directory of the runtime instance a container's labels name (owner.ts). */
    const instanceDirOf = (labels: Record<string, string>) =>
      join(
        '/tmp/sigil-docker-test',
        `${/\d+/.exec(labels['io.sigil.sandbox.owner-pidns'] ?? '')?.[0]}.${labels['io.sigil.sandbox.owner-process']}.${labels['io.sigil.sandbox.instance']}`,
      );

    it('leaves no container behind when the gateway is killed with SIGKILL (its watchdog removes it)', async () => {
      const { child, container } = await childGateway(options());
      try {
        expect(await containerExists(probes.engine.docker, container)).to.equal(true);
        const { Labels } = (await probes.engine.docker.getContainer(container).inspect()).Config;
        const instanceDir = instanceDirOf(Labels);
        expect(existsSync(instanceDir)).to.equal(true);
        const dirGone = removal(instanceDir);
        expect(
          await containerEvent(probes.engine.docker, container, 'destroy', () => child.kill('SIGKILL')),
        ).to.equal(true);
        // Its pipes and state go too.
        expect(await dirGone).to.equal(true);
      } finally {
        child.kill('SIGKILL');
      }
    });

    it('removes at start-up the containers of a gateway that died with its watchdog', async () => {
      const { child, container, watchdog } = await childGateway(options());
      try {
        process.kill(watchdog, 'SIGKILL');
        child.kill('SIGKILL');
        await new Promise((resolve) => child.once('exit', resolve));
        expect(await containerExists(probes.engine.docker, container)).to.equal(true);
        const instanceDir = instanceDirOf(
          (await probes.engine.docker.getContainer(container).inspect()).Config.Labels,
        );
        expect(existsSync(instanceDir)).to.equal(true);
        const next = await probes.runtime();
        expect(await containerExists(probes.engine.docker, container)).to.equal(false);
        expect(existsSync(instanceDir)).to.equal(false);
        expect(await next.reapLeftovers()).to.equal(0);
      } finally {
        child.kill('SIGKILL');
      }
    });

    it('two runtimes reaping the same leftovers at once both start: a removal already under way is not a failure', async () => {
      // Docker answers a second removal of a container being removed with 409 ("removal … is already
      // in progress"); gateways starting together, or a watchdog and a gateway, race like this.
      const { child, container, watchdog } = await childGateway(options());
      try {
        // Started while the child lives, so that their own start-up reaps find nothing yet.
        const reapers = await Promise.all([probes.runtime(), probes.runtime()]);
        process.kill(watchdog, 'SIGKILL');
        child.kill('SIGKILL');
        await new Promise((resolve) => child.once('exit', resolve));
        const removed = await Promise.all(
          Array.from({ length: 6 }, (_, index) => (reapers[index % 2] as DockerRuntime).reapLeftovers()),
        );
        // Exactly one removal did it; the others found it gone or going.
        expect(removed.reduce((sum, count) => sum + count, 0)).to.equal(1);
        expect(await containerExists(probes.engine.docker, container)).to.equal(false);
      } finally {
        child.kill('SIGKILL');
      }
    });
  });

  describe('engines and runtimes', () => {
    it('does not stop the gateway when the engine is down; status says so and spawn rejects unavailable naming it', async () => {
      const socketPath = join(mkdtempSync(join(tmpdir(), 'sigil-no-engine-')), 'docker.sock');
      const down = await probes.runtime({ engine: { socketPath } });
      const status = await down.status();
      expect(status.runs).to.deep.equal({ host: [], image: false });
      expect(status.details?.engine).to.include({ reachable: false, address: `unix://${socketPath}` });
      const error = await rejection(down.spawn(probeSpec('sleep')));
      expect(error.code).to.equal('unavailable');
      expect(error.details?.reason).to.equal('engine_unreachable');
      expect(error.message).to.include(socketPath).and.to.include('ENOENT');
    });

    it('refuses an install root the container user cannot read, naming it', async () => {
      const root = mkdtempSync(join(tmpdir(), 'sigil-private-root-'));
      try {
        chmodSync(root, 0o700);
        const error = await rejection(
          runtime.spawn({
            launch: { kind: 'host', runtime: 'node', root, args: [] },
            env: {},
            networkAllowList: [],
          }),
        );
        expect(error.code).to.equal('invalid_request');
        expect(error.details?.reason).to.equal('install_root_unreadable');
        expect(error.message).to.include(root);
      } finally {
        rmSync(root, { recursive: true, force: true });
      }
    });

    it('refuses a bad spec as invalid_request and an image named by tag', async () => {
      const bad = await rejection(
        runtime.spawn({
          launch: { kind: 'image', image: 'sigil-test/node:latest', args: [] },
          env: {},
          networkAllowList: [],
        }),
      );
      expect(bad.code).to.equal('invalid_request');
      expect(bad.message).to.include('launch.image');
      const env = await rejection(runtime.spawn({ ...probeSpec('sleep'), env: { 'NOT-A-NAME': 'x' } }));
      expect(env.code).to.equal('invalid_request');
    });

    it('rejects unavailable, naming the image, when a pinned image can be neither found nor pulled', async () => {
      const image = `127.0.0.1:9/sigil-test/missing@sha256:${'0'.repeat(64)}`;
      const error = await rejection(
        runtime.spawn({ launch: { kind: 'image', image, args: [] }, env: {}, networkAllowList: [] }),
      );
      expect(error.code).to.equal('unavailable');
      expect(error.message).to.include(image);
    });

    it('says in status() what it enforces', async () => {
      const status: SandboxStatus = await runtime.status();
      expect(status).to.deep.include({
        runtime: 'docker',
        runs: { host: ['node', 'python'], image: true },
        limits: 'engine',
      });
      expect(status.syscallFilter).to.deep.equal({
        enforced: true,
        denied: [...DENIED_SYSCALLS, 'clone3', 'clone of new namespaces'],
        otherAbis: 'killed',
      });
      expect(status.details?.engine).to.include({ reachable: true, version: '20.10.24+dfsg1' });
    });

    it("runs under gVisor when runtime is 'runsc', the kernel answering being gVisor's", async () => {
      const gvisor = await probes.runtime({ runtime: 'runsc' });
      const sandbox = await gvisor.spawn({
        launch: {
          kind: 'host',
          runtime: 'node',
          root: dirname(fixturePath('mcp', 'python-echo', 'server.py')),
          args: ['-e', 'console.log(require("os").release())'],
        },
        env: {},
        networkAllowList: [],
      });
      let out = '';
      sandbox.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
      expect((await sandbox.exited).code).to.equal(0);
      expect(out.trim()).to.equal('4.4.0'); // what gVisor's kernel reports
      expect(
        await probes.engine.docker
          .getContainer(sandbox.containerId)
          .inspect()
          .catch(() => undefined),
      ).to.equal(undefined);
      const status = await gvisor.status();
      expect(status.details?.ociRuntime).to.include({ name: 'runsc', gvisor: true });
      expect(status.syscallFilter.enforced).to.equal(false);
    });

    it('under gVisor, keeps /tmp noexec, drops privileges and reaches only the allow-list', async () => {
      const gvisor = await probes.runtime({ runtime: 'runsc' });
      const tmp = await runProbe<{ binary: string; script: string }>(gvisor, 'tmpExec');
      expect([tmp.report.binary, tmp.report.script]).to.deep.equal(['EACCES', 'EACCES']);
      const privileges = await runProbe<{ status: Record<string, string>; uid: number; setuidRoot: string }>(
        gvisor,
        'privileges',
      );
      expect(privileges.report.status.CapEff).to.equal('0000000000000000');
      expect(privileges.report.uid).to.not.equal(0);
      expect(privileges.report.setuidRoot).to.equal('EPERM');
      const [allowed, other] = await Promise.all([echoServer(), echoServer()]);
      try {
        const net = await runProbe<{ results: { direct: string; proxy: { status: number | string } }[] }>(
          gvisor,
          'net',
          {
            args: [target(allowed), target(other)],
            allow: [target(allowed)],
          },
        );
        expect(net.report.results.map((result) => result.proxy.status)).to.deep.equal([200, 403]);
        for (const result of net.report.results) expect(result.direct).to.not.equal('connected');
      } finally {
        allowed.close();
        other.close();
      }
    });

    it('talks to a remote engine over TCP with TLS: an image loaded and run over it, host programs refused', async () => {
      const { tls } = probes.engine;
      const remote = await probes.runtime({
        engine: { host: tls.host, port: tls.port, ca: tls.ca, cert: tls.cert, key: tls.key },
      });
      const status = await remote.status();
      expect(status.details?.engine).to.include({
        reachable: true,
        address: `tcp://${tls.host}:${tls.port} (TLS)`,
      });
      expect(status.runs).to.deep.equal({ host: [], image: true });
      const dir = mkdtempSync(join(tmpdir(), 'sigil-layout-'));
      try {
        const { layout, digest } = await ociLayoutOf(probes.engine.docker, probes.engine.images.node, dir);
        const sandbox = await remote.spawn({
          launch: {
            kind: 'image',
            image: `sigil-test/layout@${digest}`,
            layout,
            entrypoint: ['node'],
            args: [IMAGE_PATHS.everything, 'stdio'],
          },
          env: { SIGIL_SECRET: 'over TLS' },
          networkAllowList: [],
        });
        const { text } = await callThrough(sandbox, 'echo', { message: 'through TLS' });
        expect(text).to.include('through TLS');
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
      const host = await rejection(
        remote.spawn({
          launch: { kind: 'host', runtime: 'python', root: '/', args: [] },
          env: {},
          networkAllowList: [],
        }),
      );
      expect(host.code).to.equal('unavailable');
      expect(host.details?.reason).to.equal('host_program_needs_local_engine');
      const egress = await rejection(
        remote.spawn({
          ...probeSpec('sleep'),
          launch: { kind: 'image', image: `x@sha256:${'1'.repeat(64)}`, args: [] },
          networkAllowList: ['127.0.0.1:1'],
        }),
      );
      expect(egress.code).to.equal('unavailable');
    });
  });
});
