import type { HostLaunch, InstalledServer, PackageRegistryV2 } from '@sigil/plugin-api';
import {
  contractChecks,
  EvidenceRedactor,
  packageRegistryBehaviourV2,
  type PackageRegistryFixtureV2,
  packageRegistryKitV2,
  type PackageRegistryTraits,
  runChecks,
} from '@sigil/plugin-api/kit';

/**
 * Runs the package-registry v2 kit, behaviour checks included, on a deliberately broken registry:
 * each instance `load` makes, with the members `breakIt` answers in place of its own. Answers the ids
 * of the checks that failed, so that a test shows the kit catches that breakage.
 */
export async function failingChecks(
  load: () => Promise<PackageRegistryV2>,
  fixture: () => PackageRegistryFixtureV2,
  breakIt: (registry: PackageRegistryV2) => Partial<PackageRegistryV2>,
  options: { traits?: PackageRegistryTraits; timeoutMs?: number } = {},
): Promise<string[]> {
  const kit = { ...packageRegistryKitV2, behaviour: packageRegistryBehaviourV2(fixture, options.traits) };
  const broken = async () => {
    const instance = await load();
    return Object.assign(Object.create(instance) as PackageRegistryV2, breakIt(instance));
  };
  const results = await runChecks(contractChecks(kit, broken), {
    redactor: new EvidenceRedactor(),
    timeoutMs: options.timeoutMs ?? 10_000,
    contextFor: (evidence) => ({ evidence }),
  });
  return results.filter((result) => result.status === 'fail').map((result) => result.id);
}

/** A breakage: install answers a made-up entry where the registry refused content for its digest. */
export const swallowingIntegrityFailures =
  (runtime: HostLaunch['runtime']) =>
  (real: PackageRegistryV2): Partial<PackageRegistryV2> => ({
    install: (resolved, entryPoint) =>
      real.install(resolved, entryPoint).catch((err: { details?: { reason?: unknown } }): InstalledServer => {
        if (err.details?.reason !== 'integrity_mismatch') throw err;
        return {
          ...resolved,
          installedAt: new Date().toISOString(),
          sizeBytes: 0,
          hasInstallScripts: false,
          launch: { kind: 'host', runtime, root: '/nonexistent', args: [] },
        };
      }),
  });

/** A breakage: install resolves the pinned version again and installs whatever it names now. */
export const followingMovedVersions = (real: PackageRegistryV2): Partial<PackageRegistryV2> => ({
  install: async (resolved, entryPoint) =>
    real.install(await real.resolve({ name: resolved.name, range: resolved.version }), entryPoint),
});
