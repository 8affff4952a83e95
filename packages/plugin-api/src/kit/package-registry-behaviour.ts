import { existsSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { z } from 'zod';
import type { PackageRegistryV1, ResolvedPackage } from '../index.ts';
import { ensure, expectShape, failWith, pass } from './check.ts';
import type { InstanceCheck, KitContext } from './kit.ts';
import { describeKitWithBehaviour } from './mocha.ts';
import { packageRegistryKit } from './package-registry.ts';

/**
 * Behaviour of `package-registry` v1 (packages/plugin-api/src/contracts/package-registry-v1.ts), checked against
 * a registry that serves known packages. Unlike other kinds, these checks need a fixture: packages
 * published for the purpose, one of them tampered with, which only a test can set up (for npm, a
 * verdaccio). The fixture is read when a check runs, so a suite can build it in a `before` hook.
 */

/** Packages the registry serves for the checks, published by the suite (e.g. in a `before` hook). */
export interface PackageRegistryFixture {
  /** A package without install scripts, a range of it, and the exact version and digest it resolves to. */
  plain: { name: string; range: string; version: string; digest: string };
  /** A package that declares install scripts which, if any ran, would create the file `marker`. */
  scripted: { name: string; range: string; marker: string };
  /** A package whose served content does not match the digest the registry gives for it. */
  tampered: { name: string; range: string };
}

const CONTRACT = 'packages/plugin-api/src/contracts/package-registry-v1.ts';
type Context = KitContext & { instance: PackageRegistryV1 };
type RegistryCheck = InstanceCheck<PackageRegistryV1>;

const resolvedSchema = z.object({ name: z.string(), version: z.string(), digest: z.string().min(1) });
const entrySchema = resolvedSchema.extend({
  installedAt: z.iso.datetime(),
  sizeBytes: z.number().int().nonnegative(),
  hasInstallScripts: z.boolean(),
});
const installedSchema = entrySchema.extend({
  path: z.string(),
  root: z.string(),
  bin: z.record(z.string(), z.string()),
});
const statusSchema = z.object({
  entries: z.array(entrySchema),
  summary: z.object({
    packages: z.number().int().nonnegative(),
    bytes: z.number().int().nonnegative(),
    lastRefresh: z.iso.datetime().nullable(),
    nextRefresh: z.iso.datetime().nullable(),
    refreshing: z.object({ done: z.number(), total: z.number() }).nullable(),
    failed: z.number().int().nonnegative(),
  }),
});

async function resolveAndNote({ instance, evidence }: Context, name: string, range: string) {
  const resolved = expectShape(
    resolvedSchema,
    await instance.resolve(name, range),
    `resolve(${name}, ${range})`,
  );
  evidence.note(`resolve(${name}, ${range})`, resolved);
  return resolved;
}

async function installAndNote({ instance, evidence }: Context, resolved: ResolvedPackage) {
  const installed = expectShape(installedSchema, await instance.install(resolved), 'install()');
  evidence.note(`install(${resolved.name}@${resolved.version})`, installed);
  return installed;
}

/** The `details.reason` a rejection carries, or a failure when the call did not reject. */
export async function rejectionReason(promise: Promise<unknown>, what: string): Promise<unknown> {
  try {
    await promise;
  } catch (err) {
    return (err as { details?: { reason?: unknown } }).details?.reason;
  }
  failWith(`${what} succeeded`);
}

export function packageRegistryBehaviour(fixture: () => PackageRegistryFixture): readonly RegistryCheck[] {
  return [
    {
      id: 'package-registry.resolve-exact',
      level: 'MUST',
      title: 'resolve() turns a range into one exact version and the registry digest',
      spec: `${CONTRACT}: resolve, "one exact version and its registry digest"`,
      check: async (context) => {
        const { plain } = fixture();
        const resolved = await resolveAndNote(context, plain.name, plain.range);
        ensure(resolved.name === plain.name, `resolved name ${resolved.name}, expected ${plain.name}`);
        ensure(resolved.version === plain.version, `resolved ${resolved.version}, expected ${plain.version}`);
        ensure(
          resolved.digest === plain.digest,
          `digest ${resolved.digest}, the registry says ${plain.digest}`,
        );
        return pass();
      },
    },
    {
      id: 'package-registry.install-verified',
      level: 'MUST',
      title: 'install() puts the resolved package in the cache and says where',
      spec: `${CONTRACT}: install, "downloads, verifies the digest, and installs"`,
      check: async (context) => {
        const { plain } = fixture();
        const resolved = await resolveAndNote(context, plain.name, plain.range);
        const installed = await installAndNote(context, resolved);
        ensure(
          installed.name === resolved.name &&
            installed.version === resolved.version &&
            installed.digest === resolved.digest,
          'install() answered for another package, version or digest than it was given',
        );
        ensure(!relative(installed.root, installed.path).startsWith('..'), 'path is not inside root');
        const manifestFile = join(installed.path, 'package.json');
        ensure(existsSync(manifestFile), `${manifestFile} does not exist`);
        const manifest = JSON.parse(readFileSync(manifestFile, 'utf8')) as {
          name?: string;
          version?: string;
        };
        ensure(
          manifest.name === plain.name && manifest.version === plain.version,
          `path holds ${manifest.name}@${manifest.version}`,
        );
        ensure(!installed.hasInstallScripts, 'hasInstallScripts is true for a package without any');
        return pass();
      },
    },
    {
      id: 'package-registry.install-idempotent',
      level: 'MUST',
      title: 'installing the same package twice gives the same entry, listed once',
      spec: `${CONTRACT}: install, "idempotent"`,
      check: async (context) => {
        const { plain } = fixture();
        const resolved = await resolveAndNote(context, plain.name, plain.range);
        const first = await installAndNote(context, resolved);
        const second = await installAndNote(context, resolved);
        ensure(JSON.stringify(first) === JSON.stringify(second), 'the second install answered differently');
        const status = expectShape(statusSchema, await context.instance.cacheStatus(), 'cacheStatus()');
        const listed = status.entries.filter((e) => e.name === plain.name && e.version === plain.version);
        ensure(listed.length === 1, `cacheStatus() lists ${listed.length} entries for it`);
        return pass();
      },
    },
    {
      id: 'package-registry.integrity-mismatch-refused',
      level: 'MUST',
      title: 'content that does not match the registry digest is refused and leaves no cache entry',
      spec: `${CONTRACT}: install, "rejects with reason integrity_mismatch … and then leaves no cache entry"`,
      check: async (context) => {
        const { tampered } = fixture();
        const resolved = await resolveAndNote(context, tampered.name, tampered.range);
        const reason = await rejectionReason(
          context.instance.install(resolved),
          'installing tampered content',
        );
        context.evidence.note('install() of the tampered package rejected', { reason });
        ensure(
          reason === 'integrity_mismatch',
          `rejected with reason ${String(reason)}, not integrity_mismatch`,
        );
        const status = expectShape(statusSchema, await context.instance.cacheStatus(), 'cacheStatus()');
        ensure(
          !status.entries.some((e) => e.name === tampered.name),
          'cacheStatus() lists the refused package',
        );
        return pass();
      },
    },
    {
      id: 'package-registry.install-scripts-not-run',
      level: 'MUST',
      title: 'install scripts are never run, and hasInstallScripts reports them',
      spec: `${CONTRACT}: "never runs install scripts … and reports whether any exist"`,
      check: async (context) => {
        const { scripted } = fixture();
        const resolved = await resolveAndNote(context, scripted.name, scripted.range);
        const installed = await installAndNote(context, resolved);
        ensure(!existsSync(scripted.marker), `an install script ran: ${scripted.marker} exists`);
        ensure(installed.hasInstallScripts, 'hasInstallScripts is false for a package with install scripts');
        return pass();
      },
    },
    {
      id: 'package-registry.refresh-warm-set',
      level: 'MUST',
      title: 'refresh() installs the warm set, reports each package, and cacheStatus() shows it',
      spec: `${CONTRACT}: keepWarm, refresh, cacheStatus`,
      check: async ({ instance, evidence }) => {
        const { plain } = fixture();
        instance.keepWarm([{ name: plain.name, range: plain.range }]);
        const report = await instance.refresh();
        evidence.note('refresh()', report);
        const result = report.results.find((r) => r.name === plain.name && r.range === plain.range);
        ensure(result, 'the report has no result for the warm package');
        ensure(result.status !== 'failed', `refresh failed for it: ${result.error ?? '?'}`);
        ensure(result.version === plain.version, `refreshed ${result.version}, expected ${plain.version}`);
        const status = expectShape(statusSchema, await instance.cacheStatus(), 'cacheStatus()');
        evidence.note('cacheStatus().summary', status.summary);
        ensure(status.summary.packages === status.entries.length, 'summary.packages is not the entry count');
        const bytes = status.entries.reduce((sum, e) => sum + e.sizeBytes, 0);
        ensure(
          status.summary.bytes === bytes,
          `summary.bytes ${status.summary.bytes}, entries add up to ${bytes}`,
        );
        ensure(
          status.summary.lastRefresh === report.finishedAt,
          'summary.lastRefresh is not the last refresh',
        );
        ensure(
          status.entries.some((e) => e.name === plain.name),
          'the warm package is not in the cache',
        );
        return pass();
      },
    },
  ];
}

/**
 * The package-registry kit (shape and behaviour) as mocha tests, against instances from `load` (fresh
 * and started on each call, e.g. each with an empty cache) and the registry described by `fixture`.
 */
export function describePackageRegistryBehaviour(
  load: () => Promise<PackageRegistryV1>,
  fixture: () => PackageRegistryFixture,
): void {
  describeKitWithBehaviour(packageRegistryKit, packageRegistryBehaviour(fixture), load);
}
