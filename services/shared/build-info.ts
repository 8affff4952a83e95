import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
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

/** Each code file under the code's root (SOURCE_DIRS) with the SHA-256 of its content, by path. */
export type CodeFileHashes = [file: string, sha256: string][];

let cached: BuildInfo | undefined;
let loading: Promise<BuildInfo> | undefined;

/**
 * Computed once per process: the code does not change under a running process. A build's output
 * carries its code files' hashes (build.json, written by `npm run build`), so only the repository's
 * root files are read; from source all of them are hashed here (~570 files), synchronously, unless
 * loadBuildInfo() has already done it.
 */
export function buildInfo(): BuildInfo {
  cached ??= computeBuildInfo({ code: CODE_ROOT, repository: REPOSITORY_ROOT, build: BUILD });
  return cached;
}

/**
 * buildInfo() without blocking the event loop for long: the files are read one at a time, so requests
 * are served in between. Started once the services listen (services/serve.ts), so the first tools/call's
 * proof finds it done or under way rather than hashing the code on its own path.
 */
export function loadBuildInfo(): Promise<BuildInfo> {
  if (cached) return Promise.resolve(cached);
  loading ??= (async () => {
    const codeFiles = BUILD?.codeFiles ?? (await codeFileHashesAsync(CODE_ROOT));
    cached ??= computeBuildInfo(
      { code: CODE_ROOT, repository: REPOSITORY_ROOT, build: BUILD },
      process.env,
      codeFiles,
    );
    return cached;
  })().finally(() => (loading = undefined));
  return loading;
}

/** `code`: the root of the code; `build`: its manifest when it is a build's output in `repository`. */
export function computeBuildInfo(
  roots: { code: string; repository: string; build?: BuildManifest | undefined },
  env: NodeJS.ProcessEnv = process.env,
  codeFiles: CodeFileHashes = roots.build?.codeFiles ?? codeFileHashes(roots.code),
): BuildInfo {
  const { repository } = roots;
  const files = [
    ...codeFiles,
    ...ROOT_FILES.filter((file) => existsSync(join(repository, file))).map(
      (file) => [file, sha256Hex(readFileSync(join(repository, file)))] as [string, string],
    ),
  ].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const manifest = files.map(([file, hash]) => `${file}\0${hash}`).join('\n');
  const lockfile = files.find(([file]) => file === 'package-lock.json');
  return {
    codeHash: sha256Hex(manifest),
    compiled: roots.build !== undefined,
    gitCommit: env.SIGIL_GIT_COMMIT ?? readGitCommit(repository) ?? 'unknown',
    sourceRepository: env.SIGIL_SOURCE_REPOSITORY ?? null,
    files: files.length,
    lockfileSha256: lockfile?.[1] ?? null,
    nodeVersion: process.version,
    builtAt: env.SIGIL_BUILD_TIME ?? roots.build?.builtAt ?? null,
  };
}

/** The code files under `code` and their hashes, sorted by path (what `npm run build` records). */
export function codeFileHashes(code: string): CodeFileHashes {
  return SOURCE_DIRS.flatMap((dir) => listFiles(code, join(code, dir)))
    .sort()
    .map((file) => [file, sha256Hex(readFileSync(join(code, file)))]);
}

/** codeFileHashes() a file at a time, yielding to the event loop between files. */
export async function codeFileHashesAsync(code: string): Promise<CodeFileHashes> {
  const files: string[] = [];
  for (const dir of SOURCE_DIRS) files.push(...(await listFilesAsync(code, join(code, dir))));
  const hashes: CodeFileHashes = [];
  for (const file of files.sort()) hashes.push([file, sha256Hex(await readFile(join(code, file)))]);
  return hashes;
}

async function listFilesAsync(root: string, dir: string): Promise<string[]> {
  let entries;
  try {
    entries = await readdir(dir, { withFileTypes: true });
  } catch {
    return [];
  }
  const files: string[] = [];
  for (const entry of entries) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== 'node_modules') files.push(...(await listFilesAsync(root, path)));
    } else if (SOURCE_FILE.test(entry.name)) files.push(relative(root, path));
  }
  return files;
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
