import { readFileSync } from 'node:fs';
import { extname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Where the running code is, and where the repository it comes from is. From source (tsx) they are the
 * same folder. Compiled (`npm run build`, bin/build.ts), the code is the build's output, which mirrors
 * the repository's runtime folders file for file (core/x.ts → <output>/core/x.js), and the repository
 * is where the build's manifest says it was built from: package.json, package-lock.json, .git, the
 * plugin templates and packages/plugin-api as a package are only there.
 */

/** The manifest the build writes last at the root of its output (bin/sigil.js reads it too). */
export const BUILD_MANIFEST = 'build.json';

export interface BuildManifest {
  /** When the build started (ISO 8601): a file of `inputs` changed after it makes the build stale. */
  builtAt: string;
  /** The repository the build was made from, relative to the output folder. */
  sourceRoot: string;
  /** What the output was made from, relative to the repository: sources, configs, copied files. */
  inputs: string[];
  /**
   * Each code file of the output (services/shared/build-info.ts's SOURCE_DIRS) with the SHA-256 of its
   * content, by path: the code hash's part that the output fixes, so a start does not hash it again.
   */
  codeFiles?: [file: string, sha256: string][];
}

/** Modules run as .js only from a build; a source module is .ts whether tsx runs it or not. */
export const COMPILED = extname(fileURLToPath(import.meta.url)) === '.js';

/** The root of the code that runs: the repository, or the build's output. */
export const CODE_ROOT = join(fileURLToPath(import.meta.url), '..', '..');

export const BUILD: BuildManifest | undefined = COMPILED
  ? (JSON.parse(readFileSync(join(CODE_ROOT, BUILD_MANIFEST), 'utf8')) as BuildManifest)
  : undefined;

export const REPOSITORY_ROOT = BUILD === undefined ? CODE_ROOT : resolve(CODE_ROOT, BUILD.sourceRoot);
