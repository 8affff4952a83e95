import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
} from 'node:fs';
import { createServer, type Server } from 'node:net';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type {
  SandboxExit,
  SandboxLimits,
  SandboxProcess,
  SandboxRuntimeV1,
  SandboxRuntimeV2,
} from '../index.ts';
import { ensure, notApplicableBecause, pass } from './check.ts';
import type { InstanceCheck, KitContext } from './kit.ts';

/**
 * Behaviour of `sandbox-runtime` v1, black-box: each check spawns a probe (sandbox-probe.cjs, run by
 * this process's node) through `spawn()` alone, lets it try to break one promise of
 * packages/plugin-api/src/contracts/sandbox-runtime-v1.ts from inside, and fails if it managed. Everything the
 * probe is pointed at lives on this machine (listeners on 127.0.0.1, a process of this host).
 */

const CONTRACT = 'packages/plugin-api/src/contracts/sandbox-runtime-v1.ts';
/**
 * The probe program, alone in its directory so that directory can serve as a sandbox's package. It
 * ships in the package's probes/, two levels above this module in src/kit/ and in dist/kit/ alike.
 */
export const SANDBOX_PROBE_FILE = fileURLToPath(new URL('../../probes/sandbox-probe.cjs', import.meta.url));
const MiB = 1024 * 1024;

/** The checks hold for both versions of the contract: only how a probe is spawned differs. */
type SandboxCheck = InstanceCheck<SandboxRuntimeV1 | SandboxRuntimeV2>;
type SandboxContext = KitContext & { instance: SandboxRuntimeV1 | SandboxRuntimeV2 };

/** Host programs the probe borrows, at the paths it looks for them (sandbox-probe.cjs). */
const PROBE_PROGRAMS = ['/usr/bin/find', '/bin/true', '/usr/bin/unshare', '/usr/bin/setpriv'];
const PYTHON = ['/usr/bin/python3', '/bin/python3'].find((file) => existsSync(file));
let probeTools: string[] | undefined;

/**
 * What the probe borrows of this host, given to each probe's sandbox as `readOnlyPaths`: the programs
 * above, and python3 with its standard library and ctypes module (the keyring and ABI modes make raw
 * system calls through it). A runtime that mounts only what a server needs would otherwise leave the
 * probe without them, and the checks that rely on them would pass, or not apply, for want of a tool.
 */
export function probeReadOnlyPaths(): string[] {
  probeTools ??= [
    ...PROBE_PROGRAMS.filter((file) => existsSync(file)),
    ...(PYTHON
      ? [
          PYTHON,
          ...execFileSync(
            PYTHON,
            [
              '-I',
              '-S',
              '-c',
              'import os, _ctypes; print(os.path.dirname(os.__file__)); print(_ctypes.__file__)',
            ],
            { encoding: 'utf8' },
          )
            .trim()
            .split('\n'),
        ]
      : []),
  ];
  return probeTools;
}

/**
 * Host paths no server needs, which a sandbox that mounts only what its program needs does not show:
 * documentation, headers, compilers, package managers, interpreters it was not given, users' homes.
 */
const UNNEEDED_HOST_PATHS = [
  '/usr/share/doc',
  '/usr/include',
  '/usr/lib/gcc',
  '/usr/bin/gcc',
  '/usr/bin/cc',
  '/usr/bin/apt-get',
  '/usr/bin/perl',
  '/usr/bin/python3',
  '/usr/bin/curl',
  '/var/lib',
  '/home',
  '/root',
  '/etc/shadow',
];

interface ProbeOptions {
  /** Without the probe's tools (see {@link probeReadOnlyPaths}). */
  bare?: boolean;
  args?: string[];
  env?: Record<string, string>;
  allow?: string[];
  limits?: SandboxLimits;
}

interface ProbeRun<T> {
  exit: SandboxExit;
  /** The probe's last stdout line, parsed; undefined when it printed none. */
  report: T | undefined;
  stdoutBytes: number;
  stderr: string;
}

/** A package holding only the probe, in a directory anyone can read (the sandbox's user included). */
async function withProbePackage<T>(body: (probe: string, packagePath: string) => Promise<T>): Promise<T> {
  const packagePath = mkdtempSync(join(tmpdir(), 'sigil-sandbox-kit-'));
  try {
    chmodSync(packagePath, 0o755);
    const probe = join(packagePath, 'sandbox-probe.cjs');
    copyFileSync(SANDBOX_PROBE_FILE, probe);
    chmodSync(probe, 0o644);
    return await body(probe, packagePath);
  } finally {
    rmSync(packagePath, { recursive: true, force: true });
  }
}

async function startProbe(
  { instance, evidence }: SandboxContext,
  probe: string,
  packagePath: string,
  mode: string,
  options: ProbeOptions,
): Promise<SandboxProcess> {
  const spec = {
    packagePath,
    command: process.execPath,
    args: [probe, mode, ...(options.args ?? [])],
    env: options.env ?? {},
    networkAllowList: options.allow ?? [],
    ...(options.bare ? {} : { readOnlyPaths: probeReadOnlyPaths() }),
    ...(options.limits ? { limits: options.limits } : {}),
  };
  evidence.note(`spawn(probe ${mode})`, {
    args: spec.args.slice(1),
    networkAllowList: spec.networkAllowList,
    limits: options.limits,
  });
  if (instance.specVersion === 'v1') return instance.spawn(spec);
  const { packagePath: root, command: _node, args, env, readOnlyPaths, ...rest } = spec;
  return instance.spawn({
    ...rest,
    env,
    launch: { kind: 'host', runtime: 'node', root, args, ...(readOnlyPaths ? { readOnlyPaths } : {}) },
  });
}

/** A probe's report: the last line of its stdout, parsed when it is JSON. */
export function lastLineReport<T>(stdout: string): { last: string; report: T | undefined } {
  const last = stdout.trim().split('\n').pop() ?? '';
  try {
    return { last, report: JSON.parse(last) as T };
  } catch {
    return { last, report: undefined };
  }
}

/** Runs the probe in `mode` to its end and returns what it reported. */
function runProbe<T>(
  context: SandboxContext,
  mode: string,
  options: ProbeOptions = {},
): Promise<ProbeRun<T>> {
  return withProbePackage(async (probe, packagePath) => {
    const sandbox = await startProbe(context, probe, packagePath, mode, options);
    let stdout = '';
    let stdoutBytes = 0;
    let stderr = '';
    sandbox.stdout.on('data', (chunk: Buffer) => {
      stdoutBytes += chunk.length;
      if (stdout.length < 4 * MiB) stdout += chunk.toString();
    });
    sandbox.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4096)));
    const exit = await sandbox.exited;
    const { last, report } = lastLineReport<T>(stdout);
    context.evidence.note(`probe ${mode} ended`, { exit, report: last.slice(0, 1500) });
    return { exit, report, stdoutBytes, stderr };
  });
}

/** The probe's report, or a failure naming how the probe ended instead. */
function reported<T>(run: ProbeRun<T>): T {
  ensure(
    run.report !== undefined,
    `the probe reported nothing (exit ${JSON.stringify(run.exit)}; stderr: ${run.stderr.slice(-300)})`,
  );
  return run.report;
}

/** Host processes whose command line holds `token`, with their real and effective uids. */
function hostProcessesWith(token: string): { pid: number; uids: number[] }[] {
  const found: { pid: number; uids: number[] }[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (!readFileSync(`/proc/${entry}/cmdline`, 'latin1').includes(token)) continue;
      const status = readFileSync(`/proc/${entry}/status`, 'utf8');
      const uids = (/^Uid:\t(.*)$/m.exec(status)?.[1] ?? '').split('\t').map(Number);
      found.push({ pid: Number(entry), uids });
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

/**
 * A probe (`sleep`, unless `mode` says otherwise) that reports once and stays up, for checks that look
 * at it while it runs; `body` gets its report line.
 */
async function withRunningProbe<T>(
  context: SandboxContext,
  args: string[],
  body: (sandbox: SandboxProcess, report: string) => Promise<T>,
  mode = 'sleep',
  options: Omit<ProbeOptions, 'args'> = {},
): Promise<T> {
  return withProbePackage(async (probe, packagePath) => {
    const sandbox = await startProbe(context, probe, packagePath, mode, { ...options, args });
    sandbox.stderr.resume();
    try {
      let out = '';
      const line = await Promise.race([
        new Promise<string>((resolve) =>
          sandbox.stdout.on('data', (chunk: Buffer) => {
            out += chunk.toString();
            if (out.includes('\n')) resolve(out.trim());
          }),
        ),
        sandbox.exited.then(() => undefined),
      ]);
      ensure(line !== undefined, 'the probe ended before saying it was ready');
      context.evidence.note(`probe ${mode} running`, { report: line.slice(0, 1500) });
      return await body(sandbox, line);
    } finally {
      await sandbox.kill();
    }
  });
}

function echoServer(): Promise<Server> {
  return new Promise((resolve) => {
    const server = createServer((socket) => socket.pipe(socket).on('error', () => undefined));
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}

const portOf = (server: Server) => (server.address() as { port: number }).port;

async function withListeners<T>(count: number, body: (targets: string[]) => Promise<T>): Promise<T> {
  const servers = await Promise.all(Array.from({ length: count }, echoServer));
  try {
    return await body(servers.map((server) => `127.0.0.1:${portOf(server)}`));
  } finally {
    for (const server of servers) server.close();
  }
}

/** Host uids of the processes whose command line holds `token` (each seen by this host's /proc). */
const hostUidsOf = (token: string) => new Set(hostProcessesWith(token).map(({ uids }) => uids[1]));

/** What the probe's keyring `steal` saw of another sandbox's key, and what keyctl answered it. */
interface StealReport {
  unavailable?: string;
  listed: string[];
  stolen: number[];
  keyctl: number | string;
}

/** Runs `body` while a probe holds `canary` in its session and user keyrings (as far as it may). */
function withKeyHolder<T>(
  context: SandboxContext,
  canary: string,
  body: (stored: Record<string, unknown>) => Promise<T>,
): Promise<T> {
  return withRunningProbe(
    context,
    ['store', canary],
    async (_sandbox, line) => {
      const stored = JSON.parse(line) as Record<string, unknown>;
      if (typeof stored.unavailable === 'string')
        notApplicableBecause(`the probe cannot make system calls: ${stored.unavailable}`);
      return body(stored);
    },
    'keyring',
  );
}

interface NetReport {
  results: { target: string; direct: string; proxy: { status: number | string; echo?: string } }[];
}

const EMPTY_CAPS = '0000000000000000';

/**
 * Mount points of /proc/self/mounts text whose mount, the one seen there, is read-write. A mount made
 * on a mount point another already holds covers it (an engine makes a path read-only by binding it
 * read-only over itself) and comes later in the table: the last entry of each mount point is the one
 * seen.
 */
export function writableMounts(mounts: string): string[] {
  const seen = new Map<string, boolean>();
  for (const fields of mounts.split('\n').map((line) => line.split(' '))) {
    if (fields.length < 4) continue;
    const mountPoint = (fields[1] ?? '').replace(/\\([0-7]{3})/g, (_, octal: string) =>
      String.fromCharCode(parseInt(octal, 8)),
    );
    seen.delete(mountPoint);
    seen.set(mountPoint, (fields[3] ?? '').split(',').includes('rw'));
  }
  return [...seen].filter(([, writable]) => writable).map(([mountPoint]) => mountPoint);
}

/**
 * What of this host a sandbox's resolver files could carry: its name, the nameservers and search
 * domains of its /etc/resolv.conf, and the names and addresses its /etc/hosts adds to loopback and the
 * IPv6 well-known ones (which every system lists alike). Loopback nameservers name nothing of it.
 */
function hostResolverTokens(): Set<string> {
  const read = (file: string) => {
    try {
      return readFileSync(file, 'utf8');
    } catch {
      return '';
    }
  };
  const lines = (text: string) =>
    text
      .split('\n')
      .map((line) => line.replace(/#.*/, '').trim().split(/\s+/))
      .filter((fields) => fields[0]);
  const generic = (address: string) => /^(127\.|::1$|fe00::|ff0)/.test(address);
  const tokens = new Set<string>();
  if (hostname() !== 'localhost') tokens.add(hostname());
  for (const [keyword, ...values] of lines(read('/etc/resolv.conf'))) {
    if (keyword === 'nameserver')
      values.filter((value) => !generic(value)).forEach((value) => tokens.add(value));
    if (keyword === 'search' || keyword === 'domain') values.forEach((value) => tokens.add(value));
  }
  for (const [address, ...names] of lines(read('/etc/hosts'))) {
    if (!generic(address as string)) [address as string, ...names].forEach((token) => tokens.add(token));
  }
  return tokens;
}

/** Where `path` leads on this host, through its symlinks; undefined when it leads nowhere here. */
function hostRealPath(path: string): string | undefined {
  try {
    return realpathSync(path);
  } catch {
    return undefined;
  }
}

/** The files through which a resolver learns names and servers, and a process its host name. */
const RESOLVER_FILES = ['/etc/hosts', '/etc/hostname', '/etc/resolv.conf'];

export const sandboxRuntimeBehaviour: readonly SandboxCheck[] = [
  /**
   * What the probe finds writable leaves out the memory devices (null, zero, full, random, urandom),
   * known by number wherever they are bound, and /dev/tty when it cannot be opened (no controlling
   * terminal): none keeps what is written (sandbox-probe.cjs, takesWrites).
   */
  {
    id: 'sandbox-runtime.read-only-root',
    level: 'MUST',
    title: 'nothing is writable but /tmp (every directory and file probed from inside)',
    spec: `${CONTRACT}: the root filesystem is read-only: nothing is writable but /tmp`,
    check: async (context) => {
      const report = reported(await runProbe<{ writable: string[]; rootWrite: string }>(context, 'fs'));
      ensure(report.rootWrite !== 'ok', 'the probe wrote a file at /');
      const others = report.writable.filter((path) => path !== '/tmp' && !path.startsWith('/tmp/'));
      ensure(others.length === 0, `writable outside /tmp: ${others.slice(0, 10).join(', ')}`);
      ensure(report.writable.includes('/tmp'), '/tmp is not writable');
      return pass();
    },
  },
  /**
   * A mount of a memory device (an engine's /dev/null bound over /proc/keys to mask it) is left out:
   * its flag means nothing, since a write to a device goes to its driver whether the mount is read-only
   * or not (the kernel checks a read-only mount for regular files, directories and links only), and
   * those devices keep nothing. Each mount point counts once, by the mount seen there.
   */
  {
    id: 'sandbox-runtime.read-only-mounts',
    level: 'SHOULD',
    title: 'every mount but /tmp and /proc is read-only (not just unwritable for the user)',
    spec: `${CONTRACT}: the root filesystem is read-only`,
    check: async (context) => {
      const report = reported(
        await runProbe<{ mounts: string; memoryDevices?: string[] }>(context, 'mounts'),
      );
      const exempt = new Set(['/tmp', '/proc', ...(report.memoryDevices ?? [])]);
      const writable = writableMounts(report.mounts).filter((mount) => !exempt.has(mount));
      ensure(writable.length === 0, `mounted read-write: ${writable.join(', ')}`);
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.only-what-it-needs',
    level: 'SHOULD',
    title: 'the host paths no server needs (docs, compilers, package managers, homes) are not visible',
    spec: `${CONTRACT}: of the host's files it should see only the package, what command needs to run and readOnlyPaths`,
    check: async (context) => {
      const onHost = UNNEEDED_HOST_PATHS.filter((path) => existsSync(path));
      if (onHost.length === 0)
        notApplicableBecause(`none of ${UNNEEDED_HOST_PATHS.join(', ')} is on this host`);
      const report = reported(
        await runProbe<{ visible: string[] }>(context, 'visible', { args: onHost, bare: true }),
      );
      ensure(report.visible.length === 0, `visible inside: ${report.visible.join(', ')}`);
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.tmp-noexec',
    level: 'MUST',
    title: '/tmp is noexec: a binary or script copied there cannot be run',
    spec: `${CONTRACT}: /tmp ... mounted noexec, nosuid and nodev`,
    check: async (context) => {
      const report = reported(await runProbe<{ binary: string; script: string }>(context, 'tmpExec'));
      ensure(report.binary !== 'ok', 'a binary copied to /tmp ran');
      ensure(report.script !== 'ok', 'a script copied to /tmp ran');
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.no-capabilities',
    level: 'MUST',
    title: 'every capability set is empty, no_new_privs is set, and neither can be undone from inside',
    spec: `${CONTRACT}: it holds no capabilities ... and runs with no_new_privs`,
    check: async (context) => {
      interface Privileges {
        status: Record<string, string>;
        setuidRoot: string;
        nestedUserNamespace: { status: number | null };
        raiseCapability: { status: number | null };
      }
      const report = reported(await runProbe<Privileges>(context, 'privileges'));
      for (const set of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb']) {
        ensure(report.status[set] === EMPTY_CAPS, `${set} is ${report.status[set] ?? 'missing'}`);
      }
      ensure(report.status.NoNewPrivs === '1', `NoNewPrivs is ${report.status.NoNewPrivs ?? 'missing'}`);
      ensure(report.setuidRoot !== 'ok', 'setuid(0) succeeded');
      ensure(report.raiseCapability.status !== 0, 'a capability was raised');
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.non-root-host-user',
    level: 'MUST',
    title: 'the process runs as a non-root user, as this host sees it',
    spec: `${CONTRACT}: it runs as a non-root user on the host`,
    check: async (context) => {
      const token = `sigil-kit-${randomBytes(8).toString('hex')}`;
      return withRunningProbe(context, [token], async () => {
        const found = hostProcessesWith(token).filter(({ uids }) => uids.length === 4);
        context.evidence.note('host processes carrying the probe token', found);
        if (found.length === 0)
          notApplicableBecause("the sandboxed process is not visible in this host's /proc");
        const root = found.filter(({ uids }) => uids.slice(0, 2).includes(0));
        ensure(root.length === 0, `running as root on the host: pid ${root.map((p) => p.pid).join(', ')}`);
        return pass();
      });
    },
  },
  {
    id: 'sandbox-runtime.distinct-host-users',
    level: 'MUST',
    title: 'two sandboxes running at once run as two different host users',
    spec: `${CONTRACT}: it runs as a host user that no other running sandbox shares`,
    check: async (context) => {
      const [first, second] = [1, 2].map(() => `sigil-kit-${randomBytes(8).toString('hex')}`) as [
        string,
        string,
      ];
      return withRunningProbe(context, [first], () =>
        withRunningProbe(context, [second], async () => {
          const uids = [hostUidsOf(first), hostUidsOf(second)];
          context.evidence.note(
            'host uids of the two sandboxes',
            uids.map((set) => [...set]),
          );
          if (uids.some((set) => set.size === 0))
            notApplicableBecause("the sandboxed processes are not visible in this host's /proc");
          const shared = [...(uids[0] as Set<number | undefined>)].filter((uid) => uids[1]?.has(uid));
          ensure(shared.length === 0, `both sandboxes run as host uid ${shared.join(', ')}`);
          return pass();
        }),
      );
    },
  },
  {
    id: 'sandbox-runtime.keyring-isolated',
    level: 'MUST',
    title: 'a sandbox neither lists nor reads a key another running sandbox put in its keyrings',
    spec: `${CONTRACT}: no secret of it is reachable from another sandbox through any kernel channel (the kernel keyring included)`,
    check: async (context) => {
      const canary = `canary-${randomBytes(12).toString('hex')}`;
      return withKeyHolder(context, canary, async () => {
        const report = reported(await runProbe<StealReport>(context, 'keyring', { args: ['steal', canary] }));
        if (report.unavailable)
          notApplicableBecause(`the probe cannot make system calls: ${report.unavailable}`);
        ensure(report.stolen.length === 0, `read the other sandbox's key ${report.stolen.join(', ')}`);
        ensure(report.listed.length === 0, `lists the other sandbox's keys: ${report.listed.join('; ')}`);
        return pass();
      });
    },
  },
  {
    id: 'sandbox-runtime.keyring-refused',
    level: 'MUST',
    title: 'add_key and keyctl are refused inside a sandbox',
    spec: `${CONTRACT}: the kernel keyring is closed to it: add_key, request_key and keyctl fail`,
    check: async (context) => {
      const canary = `canary-${randomBytes(12).toString('hex')}`;
      return withKeyHolder(context, canary, async (stored) => {
        const added = Object.entries(stored).filter(([, result]) => typeof result !== 'string');
        ensure(
          added.length === 0,
          `add_key stored a key in the ${added.map(([ring]) => ring).join(' and ')} keyring`,
        );
        const report = reported(await runProbe<StealReport>(context, 'keyring', { args: ['steal', canary] }));
        ensure(typeof report.keyctl === 'string', `keyctl answered ${report.keyctl}`);
        return pass();
      });
    },
  },
  {
    id: 'sandbox-runtime.own-pid-namespace',
    level: 'MUST',
    title: 'sees only its own processes: a process of this host is neither listed nor reachable',
    spec: `${CONTRACT}: it sees only its own processes (its own PID namespace)`,
    check: async (context) => {
      const token = `sigil-kit-witness-${randomBytes(8).toString('hex')}`;
      const witness: ChildProcess = spawn(process.execPath, ['-e', 'setInterval(() => {}, 60000)', token], {
        stdio: 'ignore',
      });
      try {
        const report = reported(
          await runProbe<{ visible: { pid: number; cmdline: string }[]; signalHost: string[] }>(
            context,
            'pids',
            {
              args: [String(witness.pid)],
            },
          ),
        );
        const seen = report.visible.filter(({ cmdline }) => cmdline.includes(token));
        ensure(seen.length === 0, 'the probe lists a process of the host');
        ensure(report.signalHost[0] !== 'ok', `the probe could signal host pid ${witness.pid}`);
        return pass();
      } finally {
        witness.kill('SIGKILL');
      }
    },
  },
  {
    id: 'sandbox-runtime.no-network',
    level: 'MUST',
    title: "with an empty allow-list, not even the host's loopback is reachable",
    spec: `${CONTRACT}: with an empty list it reaches nothing, not even the host's loopback`,
    check: async (context) =>
      withListeners(1, async ([target]) => {
        const report = reported(await runProbe<NetReport>(context, 'net', { args: [target as string] }));
        const result = report.results[0];
        ensure(result?.direct !== 'connected', `connected to ${target} on the host`);
        ensure(result?.proxy.status !== 200, `reached ${target} through a proxy`);
        return pass();
      }),
  },
  {
    id: 'sandbox-runtime.network-allow-list',
    level: 'MUST',
    title: 'with an allow-list, the listed host:port is reachable through HTTPS_PROXY and no other is',
    spec: `${CONTRACT}: networkAllowList ... through an HTTP proxy named in HTTP_PROXY/HTTPS_PROXY, which refuses every other destination`,
    check: async (context) =>
      withListeners(2, async ([allowed, other]) => {
        const report = reported(
          await runProbe<NetReport>(context, 'net', {
            args: [allowed as string, other as string],
            allow: [allowed as string],
          }),
        );
        const [yes, no] = report.results;
        ensure(
          yes?.proxy.status === 200 && yes.proxy.echo === 'ping',
          `${allowed} is not reachable through the proxy: ${JSON.stringify(yes?.proxy)}`,
        );
        ensure(yes.direct !== 'connected', `connected to ${allowed} without the proxy`);
        ensure(no?.proxy.status !== 200, `reached ${other}, which is not on the allow-list`);
        ensure(no?.direct !== 'connected', `connected to ${other} directly`);
        return pass();
      }),
  },
  {
    id: 'sandbox-runtime.environment-exact',
    level: 'MUST',
    title: "the environment is the spec's plus PATH and HOME only, and no value of it is in a file",
    spec: `${CONTRACT}: its environment is exactly env plus what SandboxSpec.env lists as added ... no value of env is ever written to a file`,
    check: async (context) => {
      const canary = `canary-${randomBytes(12).toString('hex')}`;
      const env = { SIGIL_KIT_SECRET: canary, SIGIL_KIT_QUOTED: `it's "quoted"\n$HOME \`x\`` };
      const report = reported(
        await runProbe<{ env: Record<string, string>; canaryInFiles: string[] }>(context, 'env', {
          args: [canary],
          env,
        }),
      );
      const extra = Object.keys(report.env).filter(
        (name) => !(name in env) && name !== 'PATH' && name !== 'HOME',
      );
      ensure(extra.length === 0, `variables the spec did not give: ${extra.join(', ')}`);
      for (const [name, value] of Object.entries(env)) {
        ensure(report.env[name] === value, `${name} arrived as ${JSON.stringify(report.env[name])}`);
      }
      ensure(report.canaryInFiles.length === 0, `a secret value is in ${report.canaryInFiles.join(', ')}`);
      return pass();
    },
  },
  /**
   * A mount shows its directory's path inside its filesystem (its root): that names nothing of the
   * host's when it is where the mount is seen (a host path bound at itself), a tail of it (/sys at
   * /proc/sys), where that path leads on this host (a bind follows symlinks: /bin/true bound at itself
   * shows /usr/bin/true on a merged-/usr host), or a path of a filesystem the sandbox sees whole
   * elsewhere (an engine masks /proc/keys with its /dev/null: root /null on the tmpfs at /dev).
   *
   * The resolver files (/etc/hosts, /etc/hostname, /etc/resolv.conf) are judged by what they hold
   * instead. A container engine binds them into every container from its own directory for that
   * container, whatever the network mode, and a mount of one's own at the same path only replaces the
   * source (moby: container/container_unix.go NetworkMounts, daemon/volumes_unix.go setupMounts): their
   * roots name that directory whatever a runtime on the engine does. What would leak through them is
   * this host's name, nameservers, search domains or hosts entries, and any of those fails the check.
   */
  {
    id: 'sandbox-runtime.no-host-traces',
    level: 'SHOULD',
    title:
      "no process's environment (PID 1's included), the mount table nor the resolver files name anything of the host's",
    spec: `${CONTRACT}: nothing of the host's leaks in`,
    check: async (context) => {
      const report = reported(
        await runProbe<{
          environments: Record<string, string[] | string>;
          mounts: { device?: string; root: string; mountPoint: string }[];
          resolverFiles?: Record<string, string | { error: string }>;
        }>(context, 'hostTraces', { env: { SIGIL_KIT_VALUE: 'kit' } }),
      );
      for (const [pid, environment] of Object.entries(report.environments)) {
        if (typeof environment === 'string') continue; // not readable: nothing shown
        const extra = environment.filter(
          (entry) =>
            !['SIGIL_KIT_VALUE=kit', 'PATH', 'HOME'].some(
              (name) => entry === name || entry.startsWith(`${name}=`),
            ),
        );
        ensure(extra.length === 0, `/proc/${pid}/environ holds ${extra.join(', ')}`);
      }
      const seenWhole = new Set(report.mounts.filter(({ root }) => root === '/').map(({ device }) => device));
      const foreign = report.mounts.filter(
        ({ device, root, mountPoint }) =>
          root !== '/' &&
          ![mountPoint, hostRealPath(mountPoint)].some((path) => path?.endsWith(root)) &&
          !seenWhole.has(device) &&
          !RESOLVER_FILES.includes(mountPoint),
      );
      ensure(
        foreign.length === 0,
        `the mount table names host paths: ${foreign.map(({ root, mountPoint }) => `${root} at ${mountPoint}`).join(', ')}`,
      );
      const hostTokens = hostResolverTokens();
      for (const [file, content] of Object.entries(report.resolverFiles ?? {})) {
        if (typeof content !== 'string') continue; // absent or unreadable: nothing shown
        const named = content.split(/[^\w.:-]+/).filter((token) => hostTokens.has(token));
        ensure(named.length === 0, `${file} names this host's ${[...new Set(named)].join(', ')}`);
      }
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.limit-memory',
    level: 'MUST',
    title: 'a process allocating past memoryBytes is ended, and exited says limit: memory',
    spec: `${CONTRACT}: limits hold, and a process that breaks one is ended with SandboxExit.limit saying which`,
    check: async (context) => {
      const run = await runProbe(context, 'memory', { args: ['2048'], limits: { memoryBytes: 128 * MiB } });
      const allocated = Math.max(
        0,
        ...[...run.stderr.matchAll(/allocated (\d+) MiB/g)].map((m) => Number(m[1])),
      );
      ensure(run.report === undefined, 'the probe allocated 2 GiB under a 128 MiB limit');
      ensure(allocated < 128 + 32, `the probe held ${allocated} MiB under a 128 MiB limit`);
      ensure(run.exit.limit === 'memory', `exited says ${JSON.stringify(run.exit)}`);
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.limit-cpu',
    level: 'MUST',
    title: 'a process spinning past cpuSeconds is ended, and exited says limit: cpu',
    spec: `${CONTRACT}: SandboxLimits.cpuSeconds, CPU time of each process`,
    check: async (context) => {
      const run = await runProbe(context, 'cpu', { limits: { cpuSeconds: 1 } });
      ensure(run.exit.limit === 'cpu', `exited says ${JSON.stringify(run.exit)}`);
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.limit-pids',
    level: 'MUST',
    title: 'a fork bomb never runs more than pids processes, and this host stays responsive',
    spec: `${CONTRACT}: SandboxLimits.pids, processes and threads the sandbox may run at once`,
    check: async (context) => {
      const running = runProbe<{ peak: number; failures: number }>(context, 'forkBomb', {
        args: ['1500'],
        limits: { pids: 48 },
      });
      await new Promise((resolve) => setTimeout(resolve, 700));
      const started = performance.now();
      await new Promise((resolve) => spawn('/bin/sh', ['-c', 'exit 0']).once('close', resolve));
      const hostSpawnMs = performance.now() - started;
      context.evidence.note(
        `this host started a process in ${hostSpawnMs.toFixed(0)} ms during the fork bomb`,
      );
      const report = reported(await running);
      ensure(report.peak <= 48, `the sandbox ran ${report.peak} processes at once under a limit of 48`);
      ensure(hostSpawnMs < 2000, `this host needed ${hostSpawnMs.toFixed(0)} ms to start a process`);
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.limit-output',
    level: 'MUST',
    title: 'a process flooding stdout is cut off at outputBytes and killed, and exited says limit: output',
    spec: `${CONTRACT}: SandboxLimits.outputBytes ... past it the process is killed`,
    check: async (context) => {
      const run = await runProbe(context, 'flood', { limits: { outputBytes: MiB } });
      ensure(run.stdoutBytes <= MiB, `${run.stdoutBytes} bytes came through under a limit of ${MiB}`);
      ensure(run.exit.limit === 'output', `exited says ${JSON.stringify(run.exit)}`);
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.limit-open-files',
    level: 'MUST',
    title: 'a process holds at most openFiles descriptors (RLIMIT_NOFILE, soft and hard)',
    spec: `${CONTRACT}: each process holds at most limits.openFiles`,
    check: async (context) => {
      const report = reported(
        await runProbe<{ soft: number; hard: number; opened: number; error: string }>(context, 'openFiles', {
          limits: { openFiles: 128 },
        }),
      );
      ensure(report.soft === 128 && report.hard === 128, `RLIMIT_NOFILE is ${report.soft}/${report.hard}`);
      ensure(report.opened < 128, `opened ${report.opened} descriptors under a limit of 128`);
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.limit-egress-connections',
    level: 'MUST',
    title: 'a sandbox holds at most egressConnections connections through its allow-list; more are refused',
    spec: `${CONTRACT}: the sandbox at most limits.egressConnections connections through its allow-list (more are refused)`,
    check: async (context) =>
      withListeners(1, async ([target]) =>
        withRunningProbe(
          context,
          [target as string, '40'],
          async (_sandbox, line) => {
            const report = JSON.parse(line) as { established: number; outcomes: Record<string, number> };
            ensure(report.established >= 1, `no connection got through: ${JSON.stringify(report.outcomes)}`);
            ensure(
              report.established <= 8,
              `${report.established} connections held at once under a limit of 8`,
            );
            return pass();
          },
          'egressFlood',
          { allow: [target as string], limits: { egressConnections: 8 } },
        ),
      ),
  },
  {
    id: 'sandbox-runtime.kill-ends-everything',
    level: 'MUST',
    title: 'kill() ends the process and exited resolves with its code or signal',
    spec: `${CONTRACT}: kill() ... resolves once it has ended; exited resolves once the process and everything it started have ended`,
    check: async (context) => {
      const token = `sigil-kit-${randomBytes(8).toString('hex')}`;
      let exit: SandboxExit | undefined;
      await withRunningProbe(context, [token], async (sandbox) => {
        await sandbox.kill();
        exit = await sandbox.exited;
      });
      context.evidence.note('exited', exit);
      ensure(
        exit !== undefined && (exit.code !== null || exit.signal !== null),
        'exited has neither code nor signal',
      );
      const left = hostProcessesWith(token);
      ensure(left.length === 0, `still running after kill(): pid ${left.map((p) => p.pid).join(', ')}`);
      return pass();
    },
  },
];
