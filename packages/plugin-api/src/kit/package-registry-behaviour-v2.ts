import { existsSync } from 'node:fs';
import { isAbsolute, relative } from 'node:path';
import { z } from 'zod';
import type { EntryPoint, PackageRegistryV2, ResolvedPackage } from '../index.ts';
import { ensure, expectShape, pass } from './check.ts';
import { contractChecks, type InstanceCheck, type KitContext } from './kit.ts';
import { registerChecks } from './mocha.ts';
import { rejectionReason } from './package-registry-behaviour.ts';
import { packageRegistryKitV2 } from './package-registry.ts';

/**
 * Behaviour of `package-registry` v2 (packages/plugin-api/src/contracts/package-registry-v2.ts),
 * checked against a registry that serves packages published for the purpose: one plain, one whose
 * content does not match its digest, and one whose pinned version the registry later changes (a moved
 * tag, a republished file). The fixture is read when a check runs, so a suite can build it in `before`.
 */
export interface PackageRegistryFixtureV2 {
  /** A package, a range of it, the exact version and digest it resolves to, and an entry point of it. */
  plain: { name: string; range: string; version: string; digest: string; entryPoint: EntryPoint };
  /** A package whose served content does not match the digest the registry gives for it. */
  tampered: { name: string; range: string; entryPoint: EntryPoint };
  /**
   * A package whose version `move()` gives other content under the same version (moves a tag,
   * republishes a file): a registry must then resolve the new digest, and never install it for the
   * old pin.
   */
  moved: { name: string; range: string; entryPoint: EntryPoint; move(): Promise<void> };
  /** A package declaring install scripts which, if any ran, would create `marker` (registries that have them). */
  scripted?: { name: string; range: string; entryPoint: EntryPoint; marker: string };
}

const CONTRACT = 'packages/plugin-api/src/contracts/package-registry-v2.ts';
type Context = KitContext & { instance: PackageRegistryV2 };
type RegistryCheck = InstanceCheck<PackageRegistryV2>;

const resolvedSchema = z.object({ name: z.string(), version: z.string(), digest: z.string().min(1) });
const entrySchema = resolvedSchema.extend({
  installedAt: z.iso.datetime(),
  sizeBytes: z.number().int().nonnegative(),
  hasInstallScripts: z.boolean(),
});
const launchSchema = z.discriminatedUnion('kind', [
  z.object({
    kind: z.literal('host'),
    runtime: z.enum(['node', 'python', 'binary']),
    root: z.string().refine(isAbsolute, 'an absolute path'),
    command: z.string().optional(),
    args: z.array(z.string()),
    cwd: z.string().optional(),
    readOnlyPaths: z.array(z.string()).optional(),
    env: z.record(z.string(), z.string()).optional(),
  }),
  z.object({
    kind: z.literal('image'),
    image: z.string().regex(/@sha256:[0-9a-f]{64}$/, 'pinned by digest (name@sha256:…)'),
    entrypoint: z.array(z.string()).optional(),
    args: z.array(z.string()),
    cwd: z.string().optional(),
    layout: z.string().optional(),
    env: z.record(z.string(), z.string()).optional(),
  }),
]);
const installedSchema = entrySchema.extend({ launch: launchSchema });
const contentsSchema = z.object({ entries: z.array(entrySchema), bytes: z.number().int().nonnegative() });

async function resolveAndNote({ instance, evidence }: Context, name: string, range: string) {
  const resolved = expectShape(
    resolvedSchema,
    await instance.resolve({ name, range }),
    `resolve(${name}, ${range})`,
  );
  evidence.note(`resolve(${name}, ${range})`, resolved);
  return resolved;
}

async function installAndNote({ instance, evidence }: Context, resolved: ResolvedPackage, entry: EntryPoint) {
  const installed = expectShape(installedSchema, await instance.install(resolved, entry), 'install()');
  evidence.note(`install(${resolved.name}@${resolved.version})`, installed);
  return installed;
}

const cacheHolds = async (instance: PackageRegistryV2, name: string) =>
  expectShape(contentsSchema, await instance.cacheStatus(), 'cacheStatus()').entries.filter(
    (entry) => entry.name === name,
  );

/** What a registry's packages can hold, which decides the checks that apply to it. */
export interface PackageRegistryTraits {
  /** Its packages can declare install scripts (npm, a Git repository of a Node package); not wheels or images. */
  installScripts: boolean;
}

export function packageRegistryBehaviourV2(
  fixture: () => PackageRegistryFixtureV2,
  traits: PackageRegistryTraits = { installScripts: true },
): readonly RegistryCheck[] {
  const checks: RegistryCheck[] = [
    {
      id: 'package-registry.resolve-exact',
      level: 'MUST',
      title: 'resolve() turns a range into one exact version and the registry digest',
      spec: `${CONTRACT}: resolve, "one exact version and its digest"`,
      check: async (context) => {
        const { plain } = fixture();
        const resolved = await resolveAndNote(context, plain.name, plain.range);
        ensure(resolved.version === plain.version, `resolved ${resolved.version}, expected ${plain.version}`);
        ensure(
          resolved.digest === plain.digest,
          `digest ${resolved.digest}, the registry says ${plain.digest}`,
        );
        return pass();
      },
    },
    {
      id: 'package-registry.install-launchable',
      level: 'MUST',
      title: 'install() caches the package and says how to start its entry point',
      spec: `${CONTRACT}: install, "answers how to start entryPoint"`,
      check: async (context) => {
        const { plain } = fixture();
        const resolved = await resolveAndNote(context, plain.name, plain.range);
        const installed = await installAndNote(context, resolved, plain.entryPoint);
        ensure(
          installed.name === resolved.name &&
            installed.version === resolved.version &&
            installed.digest === resolved.digest,
          'install() answered for another package, version or digest than it was given',
        );
        const { launch } = installed;
        if (launch.kind === 'host') {
          ensure(existsSync(launch.root), `the install root ${launch.root} does not exist`);
          for (const file of [launch.command, launch.cwd].filter((f): f is string => f !== undefined))
            ensure(!relative(launch.root, file).startsWith('..'), `${file} is outside the install root`);
        }
        const listed = await cacheHolds(context.instance, plain.name);
        ensure(listed.length === 1, `cacheStatus() lists ${listed.length} entries for it`);
        return pass();
      },
    },
    {
      id: 'package-registry.install-idempotent',
      level: 'MUST',
      title: 'installing the same package twice gives the same answer, listed once',
      spec: `${CONTRACT}: install, "(idempotent)"`,
      check: async (context) => {
        const { plain } = fixture();
        const resolved = await resolveAndNote(context, plain.name, plain.range);
        const first = await installAndNote(context, resolved, plain.entryPoint);
        const second = await installAndNote(context, resolved, plain.entryPoint);
        ensure(JSON.stringify(first) === JSON.stringify(second), 'the second install answered differently');
        const listed = await cacheHolds(context.instance, plain.name);
        ensure(listed.length === 1, `cacheStatus() lists ${listed.length} entries for it`);
        return pass();
      },
    },
    {
      id: 'package-registry.unknown-entry-point',
      level: 'MUST',
      title: 'an entry point the package does not have is refused with not_found',
      spec: `${CONTRACT}: install, "not_found when the package has no such entry point"`,
      check: async (context) => {
        const { plain } = fixture();
        const resolved = await resolveAndNote(context, plain.name, plain.range);
        const reason = await rejectionReason(
          context.instance.install(resolved, { bin: 'sigil-kit-no-such-entry-point', args: [] }),
          'installing with an unknown entry point',
        );
        ensure(reason === 'not_found', `rejected with reason ${String(reason)}, not not_found`);
        return pass();
      },
    },
    {
      id: 'package-registry.integrity-mismatch-refused',
      level: 'MUST',
      title: 'content that does not match the registry digest is refused and leaves no cache entry',
      spec: `${CONTRACT}: install, "rejects with integrity_mismatch … leaving nothing behind in its cache"`,
      check: async (context) => {
        const { tampered } = fixture();
        const resolved = await resolveAndNote(context, tampered.name, tampered.range);
        const reason = await rejectionReason(
          context.instance.install(resolved, tampered.entryPoint),
          'installing tampered content',
        );
        context.evidence.note('install() of the tampered package rejected', { reason });
        ensure(
          reason === 'integrity_mismatch',
          `rejected with reason ${String(reason)}, not integrity_mismatch`,
        );
        const listed = await cacheHolds(context.instance, tampered.name);
        ensure(listed.length === 0, 'cacheStatus() lists the refused package');
        return pass();
      },
    },
    {
      id: 'package-registry.moved-version-not-followed',
      level: 'MUST',
      title:
        'a version whose content changed resolves to its new digest, and the old pin never installs the new content',
      spec: `${CONTRACT}: "resolves … once to an exact version and the registry's digest of it; the gateway pins that pair and later asks to install exactly it"`,
      check: async (context) => {
        const { moved } = fixture();
        const pinned = await resolveAndNote(context, moved.name, moved.range);
        await installAndNote(context, pinned, moved.entryPoint);
        await moved.move();
        const now = await resolveAndNote(context, moved.name, moved.range);
        ensure(
          now.version === pinned.version,
          `after the move it resolved ${now.version}, not ${pinned.version}`,
        );
        ensure(now.digest !== pinned.digest, 'after the move resolve() still answers the old digest');
        // The pin installs as it was (from the cache) or is refused; it never answers the new content.
        const again = await context.instance.install(pinned, moved.entryPoint).then(
          (installed) => installed.digest,
          (err: { details?: { reason?: unknown } }) => `refused: ${String(err.details?.reason)}`,
        );
        context.evidence.note('install() of the old pin after the move', { answer: again });
        ensure(
          again === pinned.digest || again === 'refused: integrity_mismatch',
          `install() of the old pin answered ${again}`,
        );
        const fresh = await context.instance.install(now, moved.entryPoint);
        ensure(fresh.digest === now.digest, 'install() of the new pin answered another digest');
        return pass();
      },
    },
  ];
  if (!traits.installScripts) return checks;
  checks.push({
    id: 'package-registry.install-scripts-not-run',
    level: 'MUST',
    title: 'install scripts are never run, and hasInstallScripts reports them',
    spec: `${CONTRACT}: "runs no install or build scripts unless the operator allowed them, and reports whether any exist"`,
    check: async (context) => {
      const { scripted } = fixture();
      ensure(scripted, 'the fixture has no package with install scripts (fixture.scripted)');
      const resolved = await resolveAndNote(context, scripted.name, scripted.range);
      const installed = await installAndNote(context, resolved, scripted.entryPoint);
      ensure(!existsSync(scripted.marker), `an install script ran: ${scripted.marker} exists`);
      ensure(installed.hasInstallScripts, 'hasInstallScripts is false for a package with install scripts');
      return pass();
    },
  });
  return checks;
}

/**
 * The package-registry v2 kit (shape and behaviour) as mocha tests, against instances from `load`
 * (fresh and started on each call, e.g. each with an empty cache) and the registry of `fixture`.
 */
export function describePackageRegistryBehaviourV2(
  load: () => Promise<PackageRegistryV2>,
  fixture: () => PackageRegistryFixtureV2,
  traits?: PackageRegistryTraits,
): void {
  const kit = { ...packageRegistryKitV2, behaviour: packageRegistryBehaviourV2(fixture, traits) };
  describe(`${kit.kind} ${kit.specVersion} contract kit, with behaviour`, () =>
    registerChecks(contractChecks(kit, load)));
}
