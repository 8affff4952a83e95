import { chmodSync, copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { z } from 'zod';
import type { SandboxExit, SandboxProcess, SandboxRuntimeV2, SandboxSpecV2 } from '../index.ts';
import { ensure, expectShape, notApplicableBecause, pass } from './check.ts';
import type { InstanceCheck, KitContext } from './kit.ts';
import { lastLineReport, probeReadOnlyPaths, SANDBOX_PROBE_FILE } from './sandbox-runtime-behaviour.ts';

/**
 * Behaviour of `sandbox-runtime` v2 beyond v1's (which the v1 checks probe through a host launch of
 * the probe): what `status()` says, the syscall filter probed call by call from inside, the launch's
 * environment under the caller's, Python launches, and the refusal of an image by a runtime that runs
 * none. Written for the v2 kit to include; each check quotes the sentence of
 * packages/plugin-api/src/contracts/sandbox-runtime-v2.ts it tests.
 */

const CONTRACT = 'packages/plugin-api/src/contracts/sandbox-runtime-v2.ts';

type V2Check = InstanceCheck<SandboxRuntimeV2>;
type V2Context = KitContext & { instance: SandboxRuntimeV2 };

/** The calls the contract names, as the probe's `deniedSyscalls` mode reports them. */
const FILTERED = [
  'ptrace',
  'mount',
  'umount2',
  'pivot_root',
  'add_key',
  'request_key',
  'keyctl',
  'bpf',
  'perf_event_open',
  'userfaultfd',
  'kexec_load',
  'kexec_file_load',
  'init_module',
  'finit_module',
  'delete_module',
  'unshare',
  'setns',
  'clone with CLONE_NEWUSER',
  'clone with CLONE_NEWNET',
];
/** What a refusal answers: EPERM (Docker's and ours), EACCES, or ENOSYS (as if the call did not exist). */
const REFUSALS = ['EPERM', 'EACCES', 'ENOSYS'];

const statusSchema = z.object({
  runtime: z.string().min(1),
  runs: z.object({
    host: z.array(z.enum(['node', 'python', 'binary'])),
    image: z.boolean(),
  }),
  namespaces: z.array(z.string()),
  limits: z.string().min(1),
  network: z.string().min(1),
  syscallFilter: z.union([
    z.object({
      enforced: z.literal(true),
      denied: z.array(z.string()).min(1),
      otherAbis: z.enum(['killed', 'denied']),
    }),
    z.object({ enforced: z.literal(false), reason: z.string().min(1) }),
  ]),
  running: z.number().int().nonnegative(),
  details: z.record(z.string(), z.unknown()).optional(),
});

/** A package directory holding the probe and `files`, readable by anyone (the sandbox's user included). */
async function withPackage<T>(files: Record<string, string>, body: (root: string) => Promise<T>): Promise<T> {
  const root = mkdtempSync(join(tmpdir(), 'sigil-sandbox-kit-v2-'));
  try {
    chmodSync(root, 0o755);
    copyFileSync(SANDBOX_PROBE_FILE, join(root, 'sandbox-probe.cjs'));
    for (const [name, content] of Object.entries(files)) writeFileSync(join(root, name), content);
    return await body(root);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

/** Runs `spec` to its end: its exit, its last stdout line parsed (if JSON), and its stderr's tail. */
async function runToEnd<T>(
  { instance, evidence }: V2Context,
  spec: SandboxSpecV2,
): Promise<{ exit: SandboxExit; report: T | undefined; stderr: string }> {
  evidence.note('spawn', { launch: spec.launch, networkAllowList: spec.networkAllowList });
  const sandbox: SandboxProcess = await instance.spawn(spec);
  let stdout = '';
  let stderr = '';
  sandbox.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  sandbox.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4096)));
  const exit = await sandbox.exited;
  const { last, report } = lastLineReport<T>(stdout);
  evidence.note('ended', { exit, report: last.slice(0, 1500) });
  return { exit, report, stderr };
}

interface ProbeOptions {
  args?: string[];
  /** The launch's own environment. */
  launchEnv?: Record<string, string>;
  /** The spec's environment, over the launch's. */
  env?: Record<string, string>;
}

/** The probe in `mode`, a node launch from a package of its own, with the tools it borrows. */
const probe = <T>(context: V2Context, mode: string, options: ProbeOptions = {}) =>
  withPackage({}, (root) =>
    runToEnd<T>(context, {
      launch: {
        kind: 'host',
        runtime: 'node',
        root,
        args: [join(root, 'sandbox-probe.cjs'), mode, ...(options.args ?? [])],
        readOnlyPaths: probeReadOnlyPaths(),
        ...(options.launchEnv ? { env: options.launchEnv } : {}),
      },
      env: options.env ?? {},
      networkAllowList: [],
    }),
  );

export const sandboxRuntimeV2Checks: readonly V2Check[] = [
  {
    id: 'sandbox-runtime.status',
    level: 'MUST',
    title:
      'status() says what the runtime runs and enforces: namespaces, limits, network, the syscall filter',
    spec: `${CONTRACT}: status(): What this runtime enforces on this host now, and what it can run`,
    check: async ({ instance, evidence }) => {
      const status = await instance.status();
      evidence.note('status()', status);
      expectShape(statusSchema, status, 'status()');
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.syscall-filter',
    level: 'MUST',
    title:
      'each call the contract names (ptrace, mount, the keyring, bpf, kexec, modules, unshare, setns, clone of namespaces…) is refused inside, fork and threads still work',
    spec: `${CONTRACT}: a syscall filter refuses at least ptrace, mount and umount, pivot_root, the keyring calls, bpf, perf_event_open, userfaultfd, kexec, module loading, unshare and setns, clone of new namespaces, ... or status().syscallFilter says it is off and why`,
    check: async (context) => {
      const { syscallFilter } = await context.instance.status();
      if (!syscallFilter.enforced) notApplicableBecause(`the syscall filter is off: ${syscallFilter.reason}`);
      const { report, exit, stderr } = await probe<{
        denied?: Record<string, unknown>;
        allowed?: Record<string, string>;
        unavailable?: string;
      }>(context, 'deniedSyscalls');
      if (report?.unavailable)
        notApplicableBecause(`the probe cannot make system calls: ${report.unavailable}`);
      ensure(
        report?.denied !== undefined,
        `the probe reported nothing (exit ${JSON.stringify(exit)}; ${stderr.slice(-300)})`,
      );
      const passed = FILTERED.filter((call) => !REFUSALS.includes(String(report.denied?.[call])));
      ensure(
        passed.length === 0,
        `not refused: ${passed.map((call) => `${call} (${String(report.denied?.[call])})`).join(', ')}`,
      );
      ensure(
        report.allowed?.fork === 'ok' && report.allowed.thread === 'ok',
        `fork or threads broke: ${JSON.stringify(report.allowed)}`,
      );
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.syscall-filter-other-abis',
    level: 'MUST',
    title:
      'a system call through another ABI (x32 numbering, i386 int 0x80) does not reach the kernel unfiltered',
    spec: `${CONTRACT}: ... and any call through another ABI (32-bit entry)`,
    check: async (context) => {
      const { syscallFilter } = await context.instance.status();
      if (!syscallFilter.enforced) notApplicableBecause(`the syscall filter is off: ${syscallFilter.reason}`);
      if (process.arch !== 'x64') notApplicableBecause(`no other ABI to try on ${process.arch}`);
      for (const abi of ['x32', 'i386']) {
        const { report } = await probe<{ result?: unknown; signal?: string; unavailable?: string }>(
          context,
          'syscallAbi',
          { args: [abi] },
        );
        if (report?.unavailable)
          notApplicableBecause(`the probe cannot make system calls: ${report.unavailable}`);
        // getpid answers a number when the call went through; a kill (SIGSYS) or an error means it did not.
        ensure(
          typeof report?.result !== 'number',
          `getpid through the ${abi} ABI answered ${String(report?.result)}`,
        );
      }
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.launch-environment',
    level: 'MUST',
    title:
      "the environment is the launch's env, then the spec's (which wins), plus what v1 adds: nothing else",
    spec: `${CONTRACT}: its environment is exactly the launch's env, then env, plus what v1 lists as added`,
    check: async (context) => {
      const { report } = await probe<{ env: Record<string, string> }>(context, 'env', {
        args: ['no-canary'],
        launchEnv: { SIGIL_KIT_LAUNCH: 'launch', SIGIL_KIT_BOTH: 'launch' },
        env: { SIGIL_KIT_BOTH: 'spec' },
      });
      ensure(report !== undefined, 'the probe reported nothing');
      ensure(
        report.env.SIGIL_KIT_LAUNCH === 'launch',
        `the launch's variable arrived as ${report.env.SIGIL_KIT_LAUNCH}`,
      );
      ensure(
        report.env.SIGIL_KIT_BOTH === 'spec',
        `the spec's variable did not win: ${report.env.SIGIL_KIT_BOTH}`,
      );
      const extra = Object.keys(report.env).filter(
        (name) => !['SIGIL_KIT_LAUNCH', 'SIGIL_KIT_BOTH', 'PATH', 'HOME'].includes(name),
      );
      ensure(extra.length === 0, `variables nobody gave: ${extra.join(', ')}`);
      return pass();
    },
  },
  {
    id: 'sandbox-runtime.python-launch',
    level: 'MUST',
    title:
      'a python launch runs on the interpreter the runtime supplies, or is refused as unavailable when it has none',
    spec: `${CONTRACT}: Rejects ... with unavailable when it asks for what this runtime cannot run here (... an interpreter it lacks)`,
    check: async (context) => {
      const { runs } = await context.instance.status();
      const script = 'import json, sys\nprint(json.dumps({"major": sys.version_info[0]}))\n';
      return withPackage({ 'server.py': script }, async (root) => {
        const spec: SandboxSpecV2 = {
          launch: { kind: 'host', runtime: 'python', root, args: [join(root, 'server.py')] },
          env: {},
          networkAllowList: [],
        };
        if (!runs.host.includes('python')) {
          const error = await context.instance.spawn(spec).then(
            () => undefined,
            (err: unknown) => err as { code?: string },
          );
          ensure(
            error?.code === 'unavailable',
            `a python launch without python gave ${JSON.stringify(error)}`,
          );
          return pass();
        }
        const { report, exit, stderr } = await runToEnd<{ major: number }>(context, spec);
        ensure(report?.major === 3, `the python launch ended ${JSON.stringify(exit)}: ${stderr.slice(-300)}`);
        return pass();
      });
    },
  },
  {
    id: 'sandbox-runtime.image-refused',
    level: 'MUST',
    title:
      'an image launch it cannot run is refused with unavailable: any image on a host runtime, an image no registry or layout has on an engine',
    spec: `${CONTRACT}: Rejects ... with unavailable when it asks for what this runtime cannot run here (an image on a host runtime ...)`,
    check: async ({ instance, evidence }) => {
      const error = await instance
        .spawn({
          launch: { kind: 'image', image: `sigil-kit/none@sha256:${'0'.repeat(64)}`, args: [] },
          env: {},
          networkAllowList: [],
        })
        .then(
          () => undefined,
          (err: unknown) => err as { code?: string; message?: string },
        );
      evidence.note('spawn(image)', { code: error?.code, message: error?.message });
      ensure(error?.code === 'unavailable', `an image launch gave ${error ? error.code : 'a process'}`);
      return pass();
    },
  },
];
