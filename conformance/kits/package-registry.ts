import type { PackageRegistryV1 } from '../../core/plugins/contracts/index.ts';
import type { ContractKit } from './kit.ts';
import { describeContractKit } from './mocha.ts';

/** `package-registry` v1 kit: for now the contract's shape; behaviour lands in `behaviour`. */
export const packageRegistryKit: ContractKit<'package-registry'> = {
  kind: 'package-registry',
  contractFile: 'core/plugins/contracts/package-registry-v1.ts',
  members: { registryKind: 'string', resolve: 'function', install: 'function' },
  // Next, one check per promise of package-registry-v1.ts, against a local registry (verdaccio for npm):
  // - resolve() turns a range into one exact version and the registry's digest;
  // - install() verifies the digest (a tampered tarball is refused) and is idempotent;
  // - install scripts never run, and `hasInstallScripts` reports them;
  // - the installed package runs without network access to the registry.
  behaviour: [],
};

export const describePackageRegistryKit = (load: () => Promise<PackageRegistryV1>): void =>
  describeContractKit(packageRegistryKit, load);
