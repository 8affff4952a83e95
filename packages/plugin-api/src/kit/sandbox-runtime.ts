import type { SandboxRuntimeV1 } from '../index.ts';
import type { ContractKit } from './kit.ts';
import { sandboxRuntimeBehaviour } from './sandbox-runtime-behaviour.ts';
import { describeContractKit } from './mocha.ts';

/**
 * `sandbox-runtime` v1 kit: the contract's shape, then its promises probed from inside spawned
 * processes (sandbox-runtime-behaviour.ts): read-only root, noexec /tmp, no capabilities, non-root
 * host user (a different one per running sandbox), no kernel keyring and no reach into another
 * sandbox's keys, own PID namespace, network only through the allow-list, exact environment, limits,
 * kill.
 */
export const sandboxRuntimeKit: ContractKit<'sandbox-runtime'> = {
  kind: 'sandbox-runtime',
  contractFile: 'packages/plugin-api/src/contracts/sandbox-runtime-v1.ts',
  members: { spawn: 'function' },
  behaviour: sandboxRuntimeBehaviour,
};

export const describeSandboxRuntimeKit = (load: () => Promise<SandboxRuntimeV1>): void =>
  describeContractKit(sandboxRuntimeKit, load);
