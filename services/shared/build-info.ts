import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sha256Hex } from '../../core/crypto.ts';

export interface BuildInfo {
  /** SHA-256 over every source file that runs (path and content hash, sorted): the code hash in proofs. */
  codeHash: string;
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
   * When it was built: SIGIL_BUILD_TIME as an image build sets it, or null where the code runs from
   * a checkout (a checkout has no build; its commit says which code it is).
   */
  builtAt: string | null;
}

const REPO_ROOT = join(fileURLToPath(import.meta.url), '..', '..', '..');
/** What the code hash covers: every source file of these folders, and these files at the root. */
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
  cached ??= computeBuildInfo(REPO_ROOT);
  return cached;
}

export function computeBuildInfo(root: string, env: NodeJS.ProcessEnv = process.env): BuildInfo {
  const files = [
    ...SOURCE_DIRS.flatMap((dir) => listFiles(root, join(root, dir))),
    ...ROOT_FILES.filter((f) => existsSync(join(root, f))),
  ].sort();
  const manifest = files.map((file) => `${file}\0${sha256Hex(readFileSync(join(root, file)))}`).join('\n');
  const lockfile = join(root, 'package-lock.json');
  return {
    codeHash: sha256Hex(manifest),
    gitCommit: env.SIGIL_GIT_COMMIT ?? readGitCommit(root) ?? 'unknown',
    sourceRepository: env.SIGIL_SOURCE_REPOSITORY ?? null,
    files: files.length,
    lockfileSha256: existsSync(lockfile) ? sha256Hex(readFileSync(lockfile)) : null,
    nodeVersion: process.version,
    builtAt: env.SIGIL_BUILD_TIME ?? null,
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
