import { createHash } from 'node:crypto';
import { invalidRequest } from './errors.ts';

/**
 * What a catalog entry may name: a repository URL the operator's policy allows, a ref, and the
 * digest this plugin gives a commit. Pure functions: nothing here touches the disk or the network.
 */

/** The transports git may use, and the only URL schemes accepted. */
export const SCHEMES = ['https', 'git', 'file'] as const;
export type Scheme = (typeof SCHEMES)[number];

export interface UrlPolicy {
  schemes: readonly Scheme[];
  /** Empty: any URL of an allowed scheme. Otherwise a URL ending with `/` allows what is under it, any other exactly itself. */
  allowedUrls: readonly string[];
}

/**
 * The repository URL git is given, after the policy allowed it. Refused: other schemes (`ssh://`,
 * `ext::`, scp-like `host:path`, plain `http://`), credentials (they would land in logs and records),
 * a query or fragment, and anything outside `allowedUrls`.
 */
export function repositoryUrl(name: string, policy: UrlPolicy): string {
  let url: URL;
  try {
    url = new URL(name);
  } catch {
    throw invalidRequest(
      `not a repository URL: ${JSON.stringify(name)}`,
      'Name the repository by an https://, git:// or file:// URL',
    );
  }
  const scheme = url.protocol.slice(0, -1);
  if (!(policy.schemes as readonly string[]).includes(scheme) || /[\s\\]/.test(name)) {
    throw invalidRequest(
      `repository URL scheme "${scheme}:" is not allowed: ${JSON.stringify(name)}`,
      `Allowed schemes: ${policy.schemes.map((s) => `${s}://`).join(', ')}`,
    );
  }
  if (url.username || url.password) {
    throw invalidRequest(
      'a repository URL must not carry credentials',
      'Only public repositories are supported; remove user:password@ from the URL',
    );
  }
  if (url.search || url.hash || (scheme === 'file' && url.host !== '') || (scheme !== 'file' && !url.host)) {
    throw invalidRequest(`not a repository URL git should be given: ${JSON.stringify(name)}`);
  }
  const href = url.href;
  const allowed =
    policy.allowedUrls.length === 0 ||
    policy.allowedUrls.some((entry) => (entry.endsWith('/') ? href.startsWith(entry) : href === entry));
  if (!allowed) {
    throw invalidRequest(
      `repository ${href} is not among the allowed repository URLs of registry-git`,
      'The operator lists them in the plugin option allowedUrls',
    );
  }
  return href;
}

/** A full commit id (SHA-1 object format: the only one git 2.39 fetches into a repository of ours). */
export const COMMIT_ID = /^[0-9a-f]{40}$/;

/**
 * What a catalog entry may give as `range`: a full commit id, or the name of a tag or branch. Names
 * are git's ref names, further limited so none can be read as an option, a revision expression or a path.
 */
const REF_NAME = /^(?!-)(?!.*\.\.)(?!.*\/\/)(?!.*\/$)(?!.*\.lock$)(?!.*\.$)[A-Za-z0-9._+/-]{1,200}$/;

export type RefRequest = { kind: 'commit'; commit: string } | { kind: 'name'; name: string };

export function refRequest(range: string): RefRequest {
  const ref = range.trim();
  if (COMMIT_ID.test(ref)) return { kind: 'commit', commit: ref };
  if (/^[0-9a-f]{7,39}$/.test(ref)) {
    throw invalidRequest(
      `abbreviated commit id ${ref}: give the full 40-character id`,
      'A remote repository cannot be asked for an abbreviated commit',
    );
  }
  if (!REF_NAME.test(ref) || ref.startsWith('refs/')) {
    throw invalidRequest(
      `not a tag, branch or commit id: ${JSON.stringify(range)}`,
      'Give a tag (v1.2.0), a branch (main) or a full commit id',
    );
  }
  return { kind: 'name', name: ref };
}

/** A commit and the tree it records: what this plugin's digest carries. */
export interface Pin {
  commit: string;
  tree: string;
}

const DIGEST = /^git:([0-9a-f]{40});tree:([0-9a-f]{40})$/;

/** `git:<commit id>;tree:<tree id>`: both full hex object ids, as `git rev-parse` prints them. */
export const formatDigest = (pin: Pin): string => `git:${pin.commit};tree:${pin.tree}`;

export function parseDigest(digest: string): Pin {
  const match = DIGEST.exec(digest);
  if (!match) {
    throw invalidRequest(
      `not a registry-git digest: ${JSON.stringify(digest)}`,
      'The form is git:<40-hex commit>;tree:<40-hex tree>',
    );
  }
  return { commit: match[1] as string, tree: match[2] as string };
}

/**
 * A version as `resolve` gives it: a tag's name, or a commit id (for a branch or a commit). A commit
 * id must be the digest's own commit: anything else is not something `resolve` answered.
 */
export function checkVersion(version: string, pin: Pin): void {
  if (COMMIT_ID.test(version)) {
    if (version !== pin.commit) {
      throw invalidRequest(`version ${version} is not the commit of digest git:${pin.commit}`);
    }
    return;
  }
  const ref = refRequest(version);
  if (ref.kind !== 'name') throw invalidRequest(`not a version of registry-git: ${version}`);
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** A file name for a repository URL: readable host and path, then a hash that tells URLs apart. */
export function repositoryKey(url: string): string {
  const { host, pathname } = new URL(url);
  const readable = `${host}${pathname}`
    .replace(/[^A-Za-z0-9._-]+/g, '-')
    .replace(/^[-.]+|-+$/g, '')
    .slice(-60);
  return `${readable || 'repository'}~${sha256(url).slice(0, 12)}`;
}

/** A file name for a version: as it is when plain, else made plain and told apart by a hash. */
export function versionKey(version: string): string {
  return /^[A-Za-z0-9._-]+$/.test(version)
    ? version
    : `${version.replace(/[^A-Za-z0-9._-]+/g, '+')}~${sha256(version).slice(0, 8)}`;
}
