import type { EntryPoint, LaunchDescriptor } from './launch.ts';
import type { CacheEntry, PackageSpec, ResolvedPackage } from './package-registry-v1.ts';

/**
 * `package-registry` v2: where MCP servers come from (npm, PyPI, an OCI registry, Git, or any source a
 * plugin serves), the local cache the gateway runs them from, and how to start what is installed.
 *
 * What changed from v1: `install` answers how to start an entry point (a {@link LaunchDescriptor}), so
 * the gateway runs any runtime, not only Node; the warm set and its schedule moved to the gateway,
 * which asks each registry to resolve and install (`keepWarm` and `refresh` are gone, and
 * `cacheStatus` reports only the cache). A v1 plugin keeps working: the host adapts it.
 *
 * A conforming registry:
 * - resolves a range or tag once to an exact version and the registry's digest of it; the gateway
 *   pins that pair and later asks to install exactly it;
 * - verifies everything it downloads against the registry's own digest (sha256 or stronger) before
 *   any of it can run, and refuses a mismatch, leaving nothing behind in its cache;
 * - runs no install or build scripts unless the operator allowed them, and reports whether any exist;
 * - installs atomically: an entry of the cache is complete or absent, even after a crash;
 * - installs a pinned package it holds without touching the network, so it runs offline;
 * - touches no network but the registry it is configured with.
 *
 * Failures are `SigilError`s whose `details.reason` is a {@link PackageRegistryFailureV2}, so the
 * gateway's security filter can tell an integrity failure from an unreachable registry without
 * knowing which plugin it talks to.
 */
export interface PackageRegistryV2 {
  /** The version of this contract the instance implements: its manifest's `specVersion`. */
  readonly specVersion: 'v2';
  /**
   * The registry kind catalog entries name in `registry` (`npm`, `pypi`, `oci`, `git`, or a kind of
   * the plugin's own): lowercase letters, digits and dashes, at most 63. The gateway finds the
   * registry of an entry by the kinds its manifest provides to `extensionPoints.registryKinds`.
   */
  readonly registryKind: string;
  /**
   * Resolves a version range, tag or branch to one exact version and its digest. The version names
   * what the registry promises never changes (an npm or PyPI version, an OCI tag, a Git tag, or a
   * commit for a branch); the gateway refuses a later resolution that gives a pinned version another
   * digest. Asks the registry first; when it cannot be reached, may answer from what the cache
   * knows (and says so in its log). Rejects with `not_found` when nothing matches, `unavailable`
   * when it cannot tell.
   */
  resolve(spec: PackageSpec): Promise<ResolvedPackage>;
  /**
   * Downloads, verifies and installs `resolved` into a content-addressed cache (idempotent), and
   * answers how to start `entryPoint` of it. A package already in the cache is answered without any
   * network access. Rejects with `integrity_mismatch` when the content does not match
   * `resolved.digest`, `not_found` when the package has no such entry point (its hint lists those it
   * has), `build_required` when only a source distribution exists and builds are off.
   */
  install(resolved: ResolvedPackage, entryPoint: EntryPoint): Promise<InstalledServer>;
  /** What the cache holds, for `GET /api/warmup/status`. Reads local state only. */
  cacheStatus(): Promise<CacheContents>;
}

/** Why a registry operation failed, in `SigilError.details.reason`. */
export type PackageRegistryFailureV2 =
  /** The downloaded content does not match the registry's digest; nothing was installed. */
  | 'integrity_mismatch'
  /** No such package, version or entry point. */
  | 'not_found'
  /** The registry could not be reached and the cache could not answer. */
  | 'unavailable'
  /** The registry answered with metadata that cannot be trusted or used (e.g. no strong digest). */
  | 'invalid_metadata'
  /** Only a source distribution exists, and the operator has not allowed builds. */
  | 'build_required'
  /** Installing failed for another reason (disk, a conflicting dependency tree, …). */
  | 'install_failed';

/** An installed package and how to start the entry point asked for. */
export interface InstalledServer extends CacheEntry {
  launch: LaunchDescriptor;
}

export interface CacheContents {
  entries: CacheEntry[];
  /** Bytes on disk of all entries. */
  bytes: number;
}
