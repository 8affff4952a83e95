import type { SandboxRuntimeV1, SandboxRuntimeV2 } from '../index.ts';
import type { ContractKit } from './kit.ts';
import { sandboxRuntimeV2Checks } from './sandbox-runtime-v2-checks.ts';
import { sandboxRuntimeBehaviour } from './sandbox-runtime-behaviour.ts';
import { describeContractKit } from './mocha.ts';

/**
 * `sandbox-runtime` kits: the contract's shape, then its promises probed from inside spawned
 * processes (sandbox-runtime-behaviour.ts): read-only root, noexec /tmp, no capabilities, non-root
 * host user (a different one per running sandbox), no kernel keyring and no reach into another
 * sandbox's keys, own PID namespace, network only through the allow-list, exact environment, limits,
 * kill. v2 adds `status()`, the syscall filter call by call, the launch's environment, Python and
 * images (sandbox-runtime-v2-checks.ts).
 */
export const sandboxRuntimeKit: ContractKit<'sandbox-runtime', 'v1'> = {
  kind: 'sandbox-runtime',
  specVersion: 'v1',
  contractFile: 'packages/plugin-api/src/contracts/sandbox-runtime-v1.ts',
  members: { spawn: 'function' },
  behaviour: sandboxRuntimeBehaviour,
};

export const sandboxRuntimeKitV2: ContractKit<'sandbox-runtime', 'v2'> = {
  kind: 'sandbox-runtime',
  specVersion: 'v2',
  contractFile: 'packages/plugin-api/src/contracts/sandbox-runtime-v2.ts',
  members: { spawn: 'function', status: 'function' },
  behaviour: [...sandboxRuntimeV2Checks, ...sandboxRuntimeBehaviour],
};

export const describeSandboxRuntimeKit = (load: () => Promise<SandboxRuntimeV1>): void =>
  describeContractKit(sandboxRuntimeKit, load);

export const describeSandboxRuntimeKitV2 = (load: () => Promise<SandboxRuntimeV2>): void =>
  describeContractKit(sandboxRuntimeKitV2, load);
