/**
 * `package-registry` v1: where MCP server packages come from (npm, or any source a plugin serves),
 * and the local cache the gateway runs them from.
 *
 * A conforming registry:
 * - verifies everything it downloads against the registry's own digest and refuses a mismatch,
 *   leaving nothing behind in its cache;
 * - never runs install scripts (of the package or of any dependency) and reports whether any exist;
 * - installs atomically: an entry of the cache is either complete or absent, even after a crash;
 * - serves a package it has installed without touching the network again;
 * - keeps a set of packages warm, refreshing them on demand and on a daily schedule driven by the
 *   injected clock.
 *
 * Failures are `SigilError`s whose `details.reason` is a {@link PackageRegistryFailure}, so the
 * gateway's security filter can tell an integrity failure from an unreachable registry without
 * knowing which plugin it talks to.
 */
export interface PackageRegistryV1 {
  /** The version of this contract the instance implements: its manifest's `specVersion`. */
  readonly specVersion: 'v1';
  /**
   * The registry kind catalog entries name in `registry`, e.g. `npm`: lowercase letters, digits and
   * dashes (at most 63). A plugin may bring a kind of its own (`acme-dir`). The gateway finds the
   * registry of an entry by the kinds its manifest provides to `extensionPoints.registryKinds`, which
   * include this one.
   */
  readonly registryKind: string;
  /**
   * Resolves a version range or tag to one exact version and its registry digest. Asks the registry
   * first; when it cannot be reached, may answer from what the cache already knows (and says so in its
   * log), so a restarted gateway keeps serving installed packages while the registry is down.
   * Rejects with reason `not_found` when no version matches, `unavailable` when it cannot tell.
   */
  resolve(packageName: string, versionRange: string): Promise<ResolvedPackage>;
  /**
   * Downloads, verifies the digest, and installs the package and its dependency tree into a
   * content-addressed cache keyed by name, version and digest; idempotent. A package already in the
   * cache is returned without any network access, so it runs with the registry unreachable.
   * Rejects with reason `integrity_mismatch` when the content does not match `resolved.digest` (or
   * the registry's digest of a dependency), and then leaves no cache entry.
   */
  install(resolved: ResolvedPackage): Promise<InstalledPackage>;
  /** Adds packages to the warm set that `refresh` keeps installed; duplicates are ignored. */
  keepWarm(specs: readonly PackageSpec[]): void;
  /**
   * Resolves and installs every package of the warm set now, logging progress per package. One
   * package failing does not stop the others: its failure is in the report. While a refresh runs,
   * a second call returns the same one.
   */
  refresh(): Promise<RefreshReport>;
  /** What the cache holds, for `GET /api/warmup/status`. Reads local state only. */
  cacheStatus(): Promise<CacheStatus>;
}

/** Why a registry operation failed, in `SigilError.details.reason`. */
export type PackageRegistryFailure =
  /** The downloaded content does not match the registry's digest; nothing was installed. */
  | 'integrity_mismatch'
  /** No such package, or no version matches the range or tag. */
  | 'not_found'
  /** The registry could not be reached and the cache could not answer. */
  | 'unavailable'
  /** The registry answered with metadata that cannot be trusted or used (e.g. no strong digest). */
  | 'invalid_metadata'
  /** Installing the dependency tree failed for another reason (disk, conflicting tree, …). */
  | 'install_failed';

/** A package as a catalog names it: a name and a version range or tag. */
export interface PackageSpec {
  name: string;
  /** A semver range, an exact version, or a dist-tag such as `latest`. */
  range: string;
}

export interface ResolvedPackage {
  name: string;
  version: string;
  /** The registry's own integrity value, e.g. `sha512-…` for npm, `sha256:…` for OCI. */
  digest: string;
}

/** One complete entry of the cache. */
export interface CacheEntry extends ResolvedPackage {
  /** ISO 8601 time the entry was completed, from the injected clock. */
  installedAt: string;
  /** Bytes on disk of the entry: the package and its whole dependency tree. */
  sizeBytes: number;
  /** True when the package or any of its dependencies declares install scripts (none were run). */
  hasInstallScripts: boolean;
}

export interface InstalledPackage extends CacheEntry {
  /** Absolute directory of the package itself (its `package.json`), inside `root`. */
  path: string;
  /**
   * Absolute directory holding the package and its dependency tree: what a sandbox mounts
   * read-only so that the package's imports resolve.
   */
  root: string;
  /** The package's executables by command name, as absolute paths inside `path`. */
  bin: Readonly<Record<string, string>>;
}

export interface RefreshResult extends PackageSpec {
  /** `installed`: newly installed; `cached`: the resolved version was already in the cache. */
  status: 'installed' | 'cached' | 'failed';
  version?: string;
  digest?: string;
  /** Why it failed, when it did: a message safe to show an operator. */
  error?: string;
}

export interface RefreshReport {
  /** ISO 8601 times from the injected clock. */
  startedAt: string;
  finishedAt: string;
  /** What started it: a caller (`demand`) or the daily schedule. */
  trigger: 'demand' | 'schedule';
  results: RefreshResult[];
}

export interface CacheStatus {
  entries: CacheEntry[];
  summary: {
    /** Number of complete entries in the cache. */
    packages: number;
    /** Bytes on disk of all entries. */
    bytes: number;
    /** ISO 8601 end of the last refresh, or null when none has run (this process or a previous one). */
    lastRefresh: string | null;
    /** ISO 8601 time of the next scheduled refresh, or null when the schedule is off. */
    nextRefresh: string | null;
    /** Progress of a running refresh (packages done of total), or null when none runs. */
    refreshing: { done: number; total: number } | null;
    /** Packages of the warm set that failed in the last refresh. */
    failed: number;
  };
}
