import type { PackageRegistryV1, PackageRegistryV2 } from '../index.ts';
import type { ContractKit } from './kit.ts';
import { describeContractKit } from './mocha.ts';

/**
 * `package-registry` v1 kit: the contract's shape. Its behaviour needs a registry serving known
 * packages, one of them tampered with, which only a test can set up: those checks are in
 * package-registry-behaviour.ts (`describePackageRegistryBehaviour(load, fixture)`).
 */
export const packageRegistryKit: ContractKit<'package-registry', 'v1'> = {
  kind: 'package-registry',
  specVersion: 'v1',
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

/**
 * `package-registry` v2 kit: the contract's shape; its behaviour against a registry fixture is in
 * package-registry-behaviour-v2.ts (`describePackageRegistryBehaviourV2(load, fixture)`).
 */
export const packageRegistryKitV2: ContractKit<'package-registry', 'v2'> = {
  kind: 'package-registry',
  specVersion: 'v2',
  contractFile: 'packages/plugin-api/src/contracts/package-registry-v2.ts',
  members: { registryKind: 'string', resolve: 'function', install: 'function', cacheStatus: 'function' },
  behaviour: [],
};

export const describePackageRegistryKitV2 = (load: () => Promise<PackageRegistryV2>): void =>
  describeContractKit(packageRegistryKitV2, load);
