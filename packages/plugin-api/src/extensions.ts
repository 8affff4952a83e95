import type { PluginKind } from './contracts/index.ts';
import type { CanvasNodeV2 } from './contracts/canvas-node-v2.ts';
import type { PackageRegistryV2 } from './contracts/package-registry-v2.ts';

/** Carries the interface an extension implements; never present at run time. */
declare const implementedBy: unique symbol;
/** Carries the type of a point's keys; never present at run time. */
declare const keyedBy: unique symbol;

/**
 * A place where plugins extend Sigil one key at a time: the gateway installs a catalog entry's package
 * with the plugin that provides its registry kind; a canvas runs a node with the plugin that provides
 * its node kind. The extension is the plugin's instance, which implements `T`; a plugin says which keys
 * it serves in its manifest's `provides`, and the host refuses to start when two plugins provide the
 * same key of a point, naming both. Points are told apart by `id`, so a plugin built against its own
 * copy of this package extends the host's points.
 */
export interface ExtensionPoint<T, Key extends string = string> {
  /** Stable and unique among points, e.g. `sigil.registry-kinds`. */
  readonly id: string;
  /** The version of the interface extensions implement; another version is another point. */
  readonly version: string;
  /** The plugin kind whose instances are the extensions: they implement `T`, that kind's contract. */
  readonly kind: PluginKind;
  /** What a key names, as messages and docs say it, e.g. `registry kind`. */
  readonly keyName: string;
  /** What the point is for, and who looks extensions up in it. */
  readonly description: string;
  /** The form every key must have (those who name keys, such as catalog entries, accept no other). */
  readonly keyRule?: { readonly pattern: RegExp; readonly says: string };
  // A method, so its parameter is bivariant: an extension of a contract fits a manifest of that kind,
  // and of any kind (the host's view), but not a manifest of another contract.
  [implementedBy]?(extension: T): void;
  readonly [keyedBy]?: Key;
}

/** One key of a point that a plugin serves, as its manifest lists it in `provides`. */
export interface Extension<T = unknown, Key extends string = string> {
  readonly point: ExtensionPoint<T, Key>;
  readonly key: Key;
}

/** `provides: [provide(extensionPoints.registryKinds, 'npm')]`: this plugin serves `npm`. */
export const provide = <T, Key extends string>(
  point: ExtensionPoint<T, Key>,
  key: NoInfer<Key>,
): Extension<T, Key> => Object.freeze({ point, key });

/** A registry kind, as catalog entries name it in `registry` (`npm`, `acme-dir`). */
export const REGISTRY_KIND_RULE = Object.freeze({
  pattern: /^[a-z0-9][a-z0-9-]{0,62}$/,
  says: 'lowercase letters, digits and dashes; at most 63 characters',
});

/** A canvas node kind, as workflow documents name it in a node's `kind` (`llm`, `write-files`). */
export const NODE_KIND_RULE = Object.freeze({
  pattern: /^[a-z][a-z0-9-]{0,62}$/,
  says: 'a lowercase letter, then lowercase letters, digits and dashes; at most 63 characters',
});

const point = <T, Key extends string = string>(
  definition: Omit<ExtensionPoint<T, Key>, typeof implementedBy | typeof keyedBy>,
): ExtensionPoint<T, Key> => Object.freeze(definition);

/** Every extension point of this plugin API, by the name plugins import it under. */
export const extensionPoints = Object.freeze({
  registryKinds: point<PackageRegistryV2>({
    id: 'sigil.registry-kinds',
    version: 'v1',
    kind: 'package-registry',
    keyName: 'registry kind',
    keyRule: REGISTRY_KIND_RULE,
    description:
      "The registries MCP server packages come from, by the `registry` a catalog entry names: the gateway installs an entry's package with the plugin that provides its registry kind.",
  }),
  canvasNodeKinds: point<CanvasNodeV2>({
    id: 'sigil.canvas-node-kinds',
    version: 'v2',
    kind: 'canvas-node',
    keyName: 'node kind',
    keyRule: NODE_KIND_RULE,
    description:
      'The kinds of node a canvas workflow document may use, by its `nodeKind`: the canvas runs each node with the plugin that provides its kind.',
  }),
});

const POINTS: readonly ExtensionPoint<unknown>[] = Object.values(extensionPoints);

/**
 * What is wrong with the `provides` of a manifest of `kind` (read from a module, so of any shape): an
 * entry that `provide` did not make, a point this API does not have or that another kind provides,
 * and a point of this kind left without a key (nothing else finds its plugins). The host and the
 * manifest kit both check it.
 */
export function providedExtensionProblems(kind: PluginKind, provides: unknown): string[] {
  if (provides !== undefined && !Array.isArray(provides))
    return ['manifest.provides must be a list of provide(point, key) entries'];
  const entries = (provides ?? []) as { point?: { id?: unknown }; key?: unknown }[];
  const problems = entries.flatMap((entry, index) => {
    const known = POINTS.find((candidate) => candidate.id === entry?.point?.id);
    if (!known || typeof entry.key !== 'string' || entry.key === '')
      return [
        `manifest.provides.${index} is not made by provide(point, key) with a point of extensionPoints (${POINTS.map((p) => p.id).join(', ')}) and a key`,
      ];
    if (known.kind !== kind)
      return [
        `manifest.provides.${index}: ${known.id} is provided by ${known.kind} plugins, not ${kind} ones`,
      ];
    if (known.keyRule && !known.keyRule.pattern.test(entry.key))
      return [`manifest.provides.${index}: ${known.keyName} "${entry.key}" is not ${known.keyRule.says}`];
    return [];
  });
  for (const [name, required] of Object.entries(extensionPoints)) {
    if (required.kind !== kind || entries.some((entry) => entry?.point?.id === required.id)) continue;
    problems.push(
      `a ${kind} plugin provides at least one ${required.keyName}: add provides: [provide(extensionPoints.${name}, '<${required.keyName}>')] to its manifest`,
    );
  }
  return problems;
}
