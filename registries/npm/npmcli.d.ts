/**
 * The small part of npm's own libraries that this plugin uses. They ship no types, and the
 * DefinitelyTyped ones lag several majors behind; declaring only what is called keeps the compiler
 * honest about it.
 */

declare module 'pacote' {
  /** Options understood by pacote, npm-registry-fetch and Arborist alike (npm's flat options). */
  export interface NpmFlatOptions {
    /** Default registry URL, used for unscoped and scoped packages alike unless `@scope:registry` is set. */
    registry?: string;
    /** npm's content-addressable cache (cacache) directory: packuments and tarballs, by integrity. */
    cache?: string;
    /** Revalidate cached metadata with the registry (resolution must see new versions). */
    preferOnline?: boolean;
    /** Never touch the network; answer from `cache` or fail with ENOTCACHED. */
    offline?: boolean;
    /** Expected integrity of a tarball; a mismatch fails with EINTEGRITY. */
    integrity?: string;
    /** Request the full packument instead of the abbreviated one (which lacks `scripts`). */
    fullMetadata?: boolean;
    /** Never run lifecycle scripts (preinstall, install, postinstall, prepare) of any package. */
    ignoreScripts?: boolean;
    /** The Arborist class: pacote needs it to pack a directory (`file:<dir>`). */
    Arborist?: unknown;
    /**
     * make-fetch-happen's retry of a request that failed on the network or with a 5xx (promise-retry's
     * options: tries after the first, and the backoff between them in ms); none by default.
     */
    retry?: { retries: number; factor: number; minTimeout: number; maxTimeout: number };
  }

  export interface Manifest {
    name: string;
    version: string;
    dist?: { integrity?: string; shasum?: string; tarball?: string };
    _integrity?: string;
    _resolved?: string;
    [field: string]: unknown;
  }
  const pacote: {
    /** The manifest of the version a spec picks (registry range or tag, `file:` directory or tarball). */
    manifest(spec: string, options?: NpmFlatOptions): Promise<Manifest>;
    /** The tarball of a spec; a directory is packed as `npm pack` does. */
    tarball(spec: string, options?: NpmFlatOptions): Promise<Buffer & { integrity: string }>;
  };
  export default pacote;
}

declare module '@npmcli/arborist' {
  import type { NpmFlatOptions } from 'pacote';

  export interface ArboristOptions extends NpmFlatOptions {
    /** The project directory: its package.json lists what to install into its node_modules. */
    path: string;
    audit?: boolean;
    fund?: boolean;
  }

  export interface PackageJson {
    name?: string;
    version?: string;
    scripts?: Record<string, string>;
    bin?: string | Record<string, string>;
    gypfile?: boolean;
  }

  /** A package in a tree: the root project, or one installed under its node_modules. */
  export interface Node {
    name: string;
    packageName: string;
    version: string;
    /** The integrity the tarball was verified against, from the registry's packument. */
    integrity: string | null;
    path: string;
    isRoot: boolean;
    isLink: boolean;
    package: PackageJson;
    /** Direct children (the root's node_modules), by name. */
    children: Map<string, Node>;
    /** Every node of the tree, the root included, by location. */
    inventory: Map<string, Node>;
  }

  export interface ReifyOptions {
    /** Write package.json and package-lock.json back (false: only node_modules/.package-lock.json). */
    save?: boolean;
  }

  export default class Arborist {
    constructor(options: ArboristOptions);
    /** Builds the ideal tree from package.json and makes node_modules match it. */
    reify(options?: ReifyOptions): Promise<Node>;
  }
}
