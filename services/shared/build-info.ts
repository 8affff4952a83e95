import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { sha256Hex } from '../../core/crypto.ts';
import { BUILD, CODE_ROOT, REPOSITORY_ROOT, type BuildManifest } from '../../core/layout.ts';

export interface BuildInfo {
  /**
   * SHA-256 over every file of the code that runs (path and content hash, sorted): the code hash in
   * proofs. From source the TypeScript, compiled the build's output (`compiled`).
   */
  codeHash: string;
  /** Whether the code is the output of `npm run build` rather than the TypeScript sources. */
  compiled: boolean;
  /** The git commit the code came from, or `unknown` outside a checkout without SIGIL_GIT_COMMIT. */
  gitCommit: string;
  /** Where the source is (a git URL): SIGIL_SOURCE_REPOSITORY as an image build sets it, else null. */
  sourceRepository: string | null;
  files: number;
  /** SHA-256 of package-lock.json: which dependency tree the code runs on. */
  lockfileSha256: string | null;
  /** The Node.js version running it. */
  nodeVersion: string;
  /**
   * When it was built: SIGIL_BUILD_TIME as an image build sets it, else when `npm run build` made the
   * compiled code, or null where the sources run from a checkout (its commit says which code it is).
   */
  builtAt: string | null;
}

/**
 * What the code hash covers: every source file of these folders of the code (the repository's, or
 * the same folders of a build's output), and these files at the repository's root.
 */
export const SOURCE_DIRS = [
  'core',
  'services',
  'packages/plugin-api/src',
  'providers',
  'registries',
  'plugins',
  'attestation',
  'devchain',
  'solidity',
  'conformance',
  'bin',
];
export const ROOT_FILES = ['package.json', 'package-lock.json'];
const SOURCE_FILE = /\.(ts|js|cjs|mjs|json)$/;

let cached: BuildInfo | undefined;

/** Computed once per process: the code does not change under a running process. */
export function buildInfo(): BuildInfo {
  cached ??= computeBuildInfo({ code: CODE_ROOT, repository: REPOSITORY_ROOT, build: BUILD });
  return cached;
}

/** `code`: the root of the code; `build`: its manifest when it is a build's output in `repository`. */
export function computeBuildInfo(
  roots: { code: string; repository: string; build?: BuildManifest | undefined },
  env: NodeJS.ProcessEnv = process.env,
): BuildInfo {
  const { code, repository } = roots;
  const files = [
    ...SOURCE_DIRS.flatMap((dir) => listFiles(code, join(code, dir))).map((file) => [code, file] as const),
    ...ROOT_FILES.filter((file) => existsSync(join(repository, file))).map(
      (file) => [repository, file] as const,
    ),
  ].sort(([, a], [, b]) => (a < b ? -1 : a > b ? 1 : 0));
  const manifest = files
    .map(([root, file]) => `${file}\0${sha256Hex(readFileSync(join(root, file)))}`)
    .join('\n');
  const lockfile = join(repository, 'package-lock.json');
  return {
    codeHash: sha256Hex(manifest),
    compiled: roots.build !== undefined,
    gitCommit: env.SIGIL_GIT_COMMIT ?? readGitCommit(repository) ?? 'unknown',
    sourceRepository: env.SIGIL_SOURCE_REPOSITORY ?? null,
    files: files.length,
    lockfileSha256: existsSync(lockfile) ? sha256Hex(readFileSync(lockfile)) : null,
    nodeVersion: process.version,
    builtAt: env.SIGIL_BUILD_TIME ?? roots.build?.builtAt ?? null,
  };
}

function listFiles(root: string, dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : listFiles(root, path);
    return SOURCE_FILE.test(entry.name) ? [relative(root, path)] : [];
  });
}

/** Reads HEAD without a git binary: a detached hash, or the ref it names (loose or packed). */
function readGitCommit(root: string): string | undefined {
  try {
    const head = readFileSync(join(root, '.git', 'HEAD'), 'utf8').trim();
    if (!head.startsWith('ref: ')) return head;
    const ref = head.slice(5);
    const loose = join(root, '.git', ref);
    if (existsSync(loose)) return readFileSync(loose, 'utf8').trim();
    const packed = readFileSync(join(root, '.git', 'packed-refs'), 'utf8');
    return packed
      .split('\n')
      .find((line) => line.endsWith(` ${ref}`))
      ?.split(' ')[0];
  } catch {
    return undefined;
  }
}
