import type { SandboxRuntimeV1 } from '../../core/plugins/contracts/index.ts';
import type { ContractKit } from './kit.ts';
import { describeContractKit } from './mocha.ts';

/** `sandbox-runtime` v1 kit: for now the contract's shape; behaviour lands in `behaviour`. */
export const sandboxRuntimeKit: ContractKit<'sandbox-runtime'> = {
  kind: 'sandbox-runtime',
  contractFile: 'core/plugins/contracts/sandbox-runtime-v1.ts',
  members: { spawn: 'function' },
  // Next, one check per promise of sandbox-runtime-v1.ts, probed from inside a spawned process:
  // - the root is read-only and /tmp is noexec;
  // - no capabilities, no new privileges, a non-root user;
  // - the environment is exactly `env` (nothing of the host's leaks in);
  // - the network reaches only `networkAllowList` (none when empty);
  // - `exited` resolves and `kill()` ends the process.
  behaviour: [],
};

export const describeSandboxRuntimeKit = (load: () => Promise<SandboxRuntimeV1>): void =>
  describeContractKit(sandboxRuntimeKit, load);
