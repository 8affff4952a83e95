import type { TeeBackendV1, TeeBackendV2 } from '../index.ts';
import type { ContractKit } from './kit.ts';
import { describeContractKit, type RegisterOptions } from './mocha.ts';
import { TEE_CONTRACT_V1, teeBackendBehaviour } from './tee-backend-behaviour.ts';
import { teeBackendV2Checks } from './tee-backend-v2-checks.ts';

const members = {
  platform: 'string',
  status: 'function',
  attest: 'function',
  signingKey: 'function',
} as const;

export const teeBackendKit: ContractKit<'tee-backend', 'v1'> = {
  kind: 'tee-backend',
  specVersion: 'v1',
  contractFile: TEE_CONTRACT_V1,
  members,
  behaviour: teeBackendBehaviour,
};

/**
 * v1's behaviour, and `verify`: fresh evidence verifies with its report data only, garbage fails; an
 * `offlineVerifier` module judges as `verify` does.
 */
export const teeBackendKitV2: ContractKit<'tee-backend', 'v2'> = {
  kind: 'tee-backend',
  specVersion: 'v2',
  contractFile: 'packages/plugin-api/src/contracts/tee-backend-v2.ts',
  members: { ...members, verify: 'function', offlineVerifier: 'string?' },
  behaviour: [...teeBackendBehaviour, ...teeBackendV2Checks],
};

/** For third parties' mocha suites: `describeTeeBackendKit(async () => createMyBackend())`. */
export const describeTeeBackendKit = (
  load: () => Promise<TeeBackendV1>,
  options: RegisterOptions = {},
): void => describeContractKit(teeBackendKit, load, options);

export const describeTeeBackendKitV2 = (
  load: () => Promise<TeeBackendV2>,
  options: RegisterOptions = {},
): void => describeContractKit(teeBackendKitV2, load, options);
