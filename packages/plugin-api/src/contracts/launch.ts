/**
 * How to start an installed MCP server: what a `package-registry` (v2) answers for an entry point and
 * what a `sandbox-runtime` (v2) runs. A registry describes the program; the sandbox decides where its
 * interpreter comes from (the host's, or an image's), so one installed package runs in any sandbox
 * that supports its `runtime`.
 */
export type LaunchDescriptor = HostLaunch | ImageLaunch;

/** Where a host program's code comes from: an interpreter the sandbox supplies, or the program itself. */
export type HostRuntime =
  /** `args` are Node's arguments (a script inside `root` first); the sandbox supplies `node`. */
  | 'node'
  /** `args` are Python's arguments (a script, or `-m module`); the sandbox supplies `python3`. */
  | 'python'
  /** `command` is an executable inside `root`, run as it is. */
  | 'binary';

/** A program installed on the host, under an install root the sandbox mounts read-only at the same path. */
export interface HostLaunch {
  kind: 'host';
  runtime: HostRuntime;
  /** Absolute directory holding the program and everything it imports at run time. */
  root: string;
  /** For `binary`: the executable's absolute path inside `root`. Absent for the interpreters. */
  command?: string;
  /** The interpreter's arguments (`node`, `python`) or the executable's (`binary`), then the catalog's. */
  args: readonly string[];
  /** Working directory inside the sandbox; `root` when absent. */
  cwd?: string;
  /** Host paths besides `root` the program needs to read (a shared library, data), mounted read-only. */
  readOnlyPaths?: readonly string[];
  /** Environment the program needs to find its code (e.g. `PYTHONPATH`); the caller's `env` wins on a clash. */
  env?: Readonly<Record<string, string>>;
}

/** An OCI image pinned by digest, run by a sandbox that runs images (`status().runs` has `image`). */
export interface ImageLaunch {
  kind: 'image';
  /** `repository@sha256:<64 hex>`: never a tag, so what runs is what was verified. */
  image: string;
  /** Replaces the image's entrypoint when given; the image's own otherwise. */
  entrypoint?: readonly string[];
  /** Replaces the image's command (its CMD). */
  args: readonly string[];
  /** Working directory inside the image; the image's own when absent. */
  cwd?: string;
  /**
   * Absolute host directory of an OCI image layout holding the verified image, from which a sandbox
   * whose engine lacks it loads it (a new or remote engine, or a registry that is down); without it
   * the engine pulls `image` by digest.
   */
  layout?: string;
  /** Environment the image needs besides its own; the caller's `env` wins on a clash. */
  env?: Readonly<Record<string, string>>;
}

/** Which program of a package to start, as a catalog entry names it: at most one of `bin`, `path`, `module`. */
export interface EntryPoint {
  /** An executable the package declares: an npm `bin`, a Python console script. */
  bin?: string;
  /** A file inside the package, run by its runtime. */
  path?: string;
  /** A Python module run with `python -m`. */
  module?: string;
  /** Arguments after the program's own. */
  args: readonly string[];
}
