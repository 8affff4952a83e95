import type { PackageRegistryV1 } from '../index.ts';
import type { ContractKit } from './kit.ts';
import { describeContractKit } from './mocha.ts';

/**
 * `package-registry` v1 kit: the contract's shape. Its behaviour needs a registry serving known
 * packages, one of them tampered with, which only a test can set up: those checks are in
 * package-registry-behaviour.ts (`describePackageRegistryBehaviour(load, fixture)`).
 */
export const packageRegistryKit: ContractKit<'package-registry'> = {
  kind: 'package-registry',
  contractFile: 'packages/plugin-api/src/contracts/package-registry-v1.ts',
  members: {
    registryKind: 'string',
    resolve: 'function',
    install: 'function',
    keepWarm: 'function',
    refresh: 'function',
    cacheStatus: 'function',
  },
  behaviour: [],
};

export const describePackageRegistryKit = (load: () => Promise<PackageRegistryV1>): void =>
  describeContractKit(packageRegistryKit, load);
