import { z } from 'zod';
import type { SandboxRuntimeV1, SandboxRuntimeV2 } from '../index.ts';
import { ensure, expectShape, pass } from './check.ts';
import type { ContractKit, InstanceCheck } from './kit.ts';
import { sandboxRuntimeBehaviour } from './sandbox-runtime-behaviour.ts';
import { describeContractKit } from './mocha.ts';

/**
 * `sandbox-runtime` kits: the contract's shape, then its promises probed from inside spawned
 * processes (sandbox-runtime-behaviour.ts): read-only root, noexec /tmp, no capabilities, non-root
 * host user (a different one per running sandbox), no kernel keyring and no reach into another
 * sandbox's keys, own PID namespace, network only through the allow-list, exact environment, limits,
 * kill. v2 adds `status()`, checked against what the probes find.
 */
export const sandboxRuntimeKit: ContractKit<'sandbox-runtime', 'v1'> = {
  kind: 'sandbox-runtime',
  specVersion: 'v1',
  contractFile: 'packages/plugin-api/src/contracts/sandbox-runtime-v1.ts',
  members: { spawn: 'function' },
  behaviour: sandboxRuntimeBehaviour,
};

const CONTRACT_V2 = 'packages/plugin-api/src/contracts/sandbox-runtime-v2.ts';

const statusSchema = z.object({
  runtime: z.string().min(1),
  runs: z.object({ host: z.array(z.enum(['node', 'python', 'binary'])), image: z.boolean() }),
  namespaces: z.array(z.string()),
  limits: z.string().min(1),
  network: z.string().min(1),
  syscallFilter: z.union([
    z.object({
      enforced: z.literal(true),
      denied: z.array(z.string()),
      otherAbis: z.enum(['killed', 'denied']),
    }),
    z.object({ enforced: z.literal(false), reason: z.string().min(1) }),
  ]),
  running: z.number().int().nonnegative(),
});

/** What a filter must refuse at least (sandbox-runtime-v2.ts), by the syscall names status() reports. */
export const REQUIRED_DENIED_SYSCALLS = [
  'ptrace',
  'mount',
  'umount2',
  'pivot_root',
  'keyctl',
  'add_key',
  'request_key',
  'bpf',
  'perf_event_open',
  'userfaultfd',
  'kexec_load',
  'init_module',
  'finit_module',
  'delete_module',
  'unshare',
  'setns',
] as const;

const statusReported: InstanceCheck<SandboxRuntimeV2> = {
  id: 'sandbox-runtime.status',
  level: 'MUST',
  title:
    'status() says what the runtime runs and enforces; an enforced filter refuses at least the required calls',
  spec: `${CONTRACT_V2}: status, and "a syscall filter refuses at least …, or status().syscallFilter says it is off and why"`,
  check: async ({ instance, evidence }) => {
    const status = expectShape(statusSchema, await instance.status(), 'status()');
    evidence.note('status()', status);
    ensure(status.runs.host.length > 0 || status.runs.image, 'status() says it runs nothing');
    if (status.syscallFilter.enforced) {
      const denied = new Set(status.syscallFilter.denied);
      const missing = REQUIRED_DENIED_SYSCALLS.filter((call) => !denied.has(call));
      ensure(missing.length === 0, `the filter does not refuse ${missing.join(', ')}`);
    }
    return pass();
  },
};

export const sandboxRuntimeKitV2: ContractKit<'sandbox-runtime', 'v2'> = {
  kind: 'sandbox-runtime',
  specVersion: 'v2',
  contractFile: CONTRACT_V2,
  members: { spawn: 'function', status: 'function' },
  behaviour: [statusReported, ...sandboxRuntimeBehaviour],
};

export const describeSandboxRuntimeKit = (load: () => Promise<SandboxRuntimeV1>): void =>
  describeContractKit(sandboxRuntimeKit, load);

export const describeSandboxRuntimeKitV2 = (load: () => Promise<SandboxRuntimeV2>): void =>
  describeContractKit(sandboxRuntimeKitV2, load);
