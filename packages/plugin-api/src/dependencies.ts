import { type CurrentInstanceOf, PLUGIN_KINDS, type PluginKind } from './contracts/index.ts';
import { CORE_SERVICE_NAMES, type CoreServiceName, type CoreServices } from './services.ts';

/** Carries the type a reference resolves to; never present at run time. */
declare const resolvesTo: unique symbol;

/**
 * What a plugin needs, declared in its manifest's `dependencies` under the name its factory reads it
 * by. The host resolves every reference before any plugin is created and refuses to start, naming the
 * plugin and the reference, when one cannot be resolved.
 */
export type DependencyRef<T> = (
  { readonly service: CoreServiceName } | { readonly kind: PluginKind; readonly name?: string }
) & { readonly [resolvesTo]?: T };

/** A manifest's dependencies, by the names its factory reads them under. */
export type DependencyRefs = Readonly<Record<string, DependencyRef<unknown>>>;

/** What the factory receives for `Refs`: each reference resolved to its type. */
export type ResolvedDependencies<Refs extends DependencyRefs> = {
  readonly [Name in keyof Refs]: Refs[Name] extends DependencyRef<infer T> ? T : never;
};

const service = <Name extends CoreServiceName>(name: Name): DependencyRef<CoreServices[Name]> =>
  Object.freeze({ service: name });

/** The host's services: `dependencies: { clock: coreServices.clock }` gives the factory `deps.clock`. */
export const coreServices: { readonly [Name in CoreServiceName]: DependencyRef<CoreServices[Name]> } =
  Object.freeze({
    db: service('db'),
    logger: service('logger'),
    clock: service('clock'),
    secrets: service('secrets'),
    fetch: service('fetch'),
    leases: service('leases'),
  });

/**
 * Another plugin, by kind: the one plugin of `kind` that is loaded, or, given `name`, the plugin loaded
 * under that name (its manifest name or its config `id`), which must be of `kind`. The dependency is
 * created and started first; a cycle among plugins is refused at start-up.
 */
export const pluginOfKind = <Kind extends PluginKind>(
  kind: Kind,
  name?: string,
): DependencyRef<CurrentInstanceOf<Kind>> => Object.freeze(name === undefined ? { kind } : { kind, name });

/**
 * Why `ref` (read from a manifest, so of any shape) is not a reference `coreServices` or `pluginOfKind`
 * makes, or undefined when it is one: what the host and the manifest kit both check.
 */
export function dependencyRefProblem(ref: unknown): string | undefined {
  const candidate = ref as { service?: unknown; kind?: unknown; name?: unknown } | null;
  if (typeof candidate !== 'object' || candidate === null) return 'is not a reference';
  if ('service' in candidate) {
    return (CORE_SERVICE_NAMES as readonly unknown[]).includes(candidate.service)
      ? undefined
      : `names no core service (${CORE_SERVICE_NAMES.join(', ')})`;
  }
  if (!(PLUGIN_KINDS as readonly unknown[]).includes(candidate.kind))
    return `names no plugin kind (${PLUGIN_KINDS.join(', ')})`;
  if (candidate.name !== undefined && typeof candidate.name !== 'string')
    return 'has a name that is not a string';
  return undefined;
}
