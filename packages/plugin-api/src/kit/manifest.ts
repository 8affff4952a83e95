import {
  dependencyRefProblem,
  PLUGIN_KINDS,
  type PluginKind,
  providedExtensionProblems,
  SUPPORTED_SPEC_VERSIONS,
} from '../index.ts';
import { ensure, notApplicableBecause, pass } from './check.ts';
import type { KitCheck } from './kit.ts';

/**
 * The generic kit every plugin passes whatever its kind: the manifest the plugin host reads
 * (packages/plugin-api/src/manifest.ts) is well-formed and accepts the options given.
 */

const SPEC = 'packages/plugin-api/src/manifest.ts, PluginManifest';

/** A plugin module and the options it is tested with (what `plugins[].options` would hold). */
export interface PluginUnderTest {
  exports: unknown;
  options: Record<string, unknown>;
}

/** A manifest as read from a module, before anything about it is known. */
export type UncheckedManifest = Record<string, unknown>;

/** Reads the manifest the way the plugin host does: the `manifest` export, else the default export. */
export function manifestOf(exports: unknown): UncheckedManifest | undefined {
  const candidate =
    (exports as { manifest?: unknown; default?: unknown } | null)?.manifest ??
    (exports as { default?: unknown } | null)?.default;
  return typeof candidate === 'object' && candidate !== null ? (candidate as UncheckedManifest) : undefined;
}

export function knownKind(manifest: UncheckedManifest): PluginKind | undefined {
  return (PLUGIN_KINDS as readonly unknown[]).includes(manifest.kind)
    ? (manifest.kind as PluginKind)
    : undefined;
}

interface ZodLike {
  safeParse(value: unknown): {
    success: boolean;
    data?: unknown;
    error?: { issues: { path: PropertyKey[]; message: string }[] };
  };
}

const isZodLike = (value: unknown): value is ZodLike =>
  typeof (value as ZodLike | null)?.safeParse === 'function';

/** Why the schema rejects the options, or undefined when it accepts them. */
function configProblem(manifest: UncheckedManifest, options: Record<string, unknown>): string | undefined {
  if (!isZodLike(manifest.config)) return 'config is not a zod schema (it has no safeParse)';
  const parsed = manifest.config.safeParse(options);
  if (parsed.success) return undefined;
  const issue = parsed.error?.issues[0];
  const at = ['options', ...(issue?.path ?? []).map(String)].join('.');
  return `config rejects the options at ${at}: ${issue?.message ?? 'invalid'}`;
}

function factoryProblem(manifest: UncheckedManifest): string | undefined {
  if (typeof manifest.create !== 'function') return 'create is not a function';
  const { dependencies } = manifest;
  if (dependencies === undefined) return undefined;
  if (typeof dependencies !== 'object' || dependencies === null || Array.isArray(dependencies))
    return 'dependencies is not an object of references by name (coreServices.clock, pluginOfKind(...))';
  const malformed = Object.entries(dependencies).filter(([, ref]) => dependencyRefProblem(ref) !== undefined);
  if (malformed.length > 0)
    return `dependencies ${malformed.map(([name]) => name).join(', ')} are not references made by coreServices or pluginOfKind`;
  return undefined;
}

/** Dependencies on other plugins: the kit can only provide the core services. */
function foreignDependencies(manifest: UncheckedManifest): string[] {
  const declared = Object.entries((manifest.dependencies ?? {}) as Record<string, { service?: unknown }>);
  return declared.filter(([, ref]) => ref.service === undefined).map(([name]) => name);
}

/**
 * Why no instance can be made for the contract kit, or undefined when one can. The manifest checks
 * report each of these as a failure once; the contract checks are then not applicable.
 */
export function instantiationBlocker(subject: PluginUnderTest): string | undefined {
  const manifest = manifestOf(subject.exports);
  if (!manifest) return 'the module exports no manifest';
  if (!knownKind(manifest)) return `unknown kind "${String(manifest.kind)}"`;
  const problem = configProblem(manifest, subject.options) ?? factoryProblem(manifest);
  if (problem) return problem;
  const foreign = foreignDependencies(manifest);
  if (foreign.length > 0) {
    return `it depends on other plugins (${foreign.join(', ')}); test it from mocha with describe<Kind>Kit and your own instances`;
  }
  return undefined;
}

/** The manifest of the subject, or the check ends as not applicable (`manifest.exported` reports why). */
function requireManifest(subject: PluginUnderTest): UncheckedManifest {
  return manifestOf(subject.exports) ?? notApplicableBecause('the module exports no manifest');
}

export function manifestChecks(subject: PluginUnderTest): KitCheck[] {
  return [
    {
      id: 'manifest.exported',
      level: 'MUST',
      title: 'The module exports a manifest object (`manifest` or default export)',
      spec: `${SPEC}: "What a plugin module exports (as default or manifest)"`,
      check: async () => {
        ensure(manifestOf(subject.exports), 'neither a `manifest` nor a default export is an object');
        return pass();
      },
    },
    {
      id: 'manifest.kind-known',
      level: 'MUST',
      title: 'kind is a plugin kind this core knows',
      spec: 'packages/plugin-api/src/contracts/index.ts, PluginContracts',
      check: async () => {
        const manifest = requireManifest(subject);
        ensure(
          knownKind(manifest),
          `kind "${String(manifest.kind)}" is not one of ${PLUGIN_KINDS.join(', ')}`,
        );
        return pass();
      },
    },
    {
      id: 'manifest.spec-version-supported',
      level: 'MUST',
      title: 'specVersion is one this core supports for the kind',
      spec: 'packages/plugin-api/src/contracts/index.ts, SUPPORTED_SPEC_VERSIONS',
      check: async () => {
        const manifest = requireManifest(subject);
        const kind = knownKind(manifest) ?? notApplicableBecause('the kind is unknown');
        const supported = SUPPORTED_SPEC_VERSIONS[kind] as readonly string[];
        ensure(
          supported.includes(manifest.specVersion as string),
          `specVersion "${String(manifest.specVersion)}" of ${kind} is not supported (supported: ${supported.join(', ')})`,
        );
        return pass();
      },
    },
    {
      id: 'manifest.name-format',
      level: 'MUST',
      title: 'name is lowercase letters, digits and dashes',
      spec: `${SPEC}: name, "Lowercase, dash-separated"`,
      check: async () => {
        const { name } = requireManifest(subject);
        ensure(
          typeof name === 'string' && /^[a-z0-9][a-z0-9-]*$/.test(name),
          `name ${JSON.stringify(name)} is not lowercase and dash-separated`,
        );
        return pass();
      },
    },
    {
      id: 'manifest.config-accepts-options',
      level: 'MUST',
      title: 'config is a zod schema that accepts the options given',
      spec: `${SPEC}: config, "The zod schema of the plugin's options"`,
      check: async () => {
        const problem = configProblem(requireManifest(subject), subject.options);
        ensure(problem === undefined, problem ?? '');
        return pass();
      },
    },
    {
      id: 'manifest.factory',
      level: 'MUST',
      title: 'create is a function and dependencies, if any, references by name',
      spec: `${SPEC}: create(context), dependencies`,
      check: async () => {
        const problem = factoryProblem(requireManifest(subject));
        ensure(problem === undefined, problem ?? '');
        return pass();
      },
    },
    {
      id: 'manifest.provides',
      level: 'MUST',
      title: 'provides names keys of extension points of its kind, at least one of each such point',
      spec: `${SPEC}: provides, "A plugin of a kind that has extension points provides at least one key of each"`,
      check: async () => {
        const manifest = requireManifest(subject);
        const kind = knownKind(manifest) ?? notApplicableBecause('the kind is unknown');
        const problems = providedExtensionProblems(kind, manifest.provides);
        ensure(problems.length === 0, problems.join('; '));
        return pass();
      },
    },
  ];
}
