/**
 * `package-registry` v1: where MCP server packages come from (npm, PyPI, OCI, Git).
 * A conforming registry verifies what it downloads and never runs install scripts.
 */
export interface PackageRegistryV1 {
  readonly specVersion: 'v1';
  /** The registry kind named in catalog entries, e.g. `npm`. */
  readonly registryKind: 'npm' | 'pypi' | 'oci' | 'git';
  /** Resolves a version range or tag to one exact version and its registry digest. */
  resolve(packageName: string, versionRange: string): Promise<ResolvedPackage>;
  /**
   * Downloads, verifies the digest, and installs into a content-addressed cache; idempotent.
   * Afterwards the package runs with no network access to the registry.
   */
  install(resolved: ResolvedPackage): Promise<InstalledPackage>;
}

export interface ResolvedPackage {
  name: string;
  version: string;
  /** The registry's own integrity value, e.g. `sha512-…` for npm, `sha256:…` for OCI. */
  digest: string;
}

export interface InstalledPackage extends ResolvedPackage {
  /** Absolute directory holding the installed package, read-only to sandboxes. */
  path: string;
  /** True when the package declares install scripts (they were not run). */
  hasInstallScripts: boolean;
}
