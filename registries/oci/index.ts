import { resolve as resolvePath } from 'node:path';
import { z } from 'zod';
import {
  type CacheContents,
  type Clock,
  coreServices,
  definePlugin,
  type EntryPoint,
  extensionPoints,
  type Fetch,
  type InstalledServer,
  type PackageRegistryV2,
  type PackageSpec,
  type PluginLifecycle,
  type PluginLogger,
  provide,
  type ResolvedPackage,
  type SecretRegistry,
} from '@sigil/plugin-api';
import { cacheContents, SingleFlight } from '@sigil/plugin-api/cache';
import { ImageCache } from './cache.ts';
import { Distribution } from './distribution.ts';
import { invalidRequest, OciRegistryError } from './errors.ts';
import { checkEntryPoint, launchOf } from './entry-point.ts';
import { downloadImage } from './install.ts';
import {
  checkConfig,
  choosePlatform,
  hostPlatform,
  imageManifestOf,
  isIndex,
  parseManifest,
  type Platform,
} from './manifest.ts';
import {
  checkReference,
  DIGEST,
  DOMAIN,
  isLoopback,
  normalDomain,
  Registries,
  type Repository,
} from './reference.ts';

export { OciIntegrityError, OciRegistryError } from './errors.ts';

const domain = z.string().regex(DOMAIN, 'a host or host:port');

export const ociRegistryConfig = z
  .object({
    registry: z
      .url({ protocol: /^https?$/ })
      .refine((url) => new URL(url).pathname === '/' && !/[?#]/.test(url), 'an origin, with no path')
      .default('https://registry-1.docker.io')
      .describe('Registry of repositories named without a host (mcp/echo): Docker Hub unless set'),
    hosts: z
      .array(domain)
      .default([])
      .describe('Other registries a repository may name (host:port/repository); no other is contacted'),
    insecure: z
      .array(domain)
      .default([])
      .describe('Registries reached over plain http besides loopback ones; https for all others'),
    credentials: z
      .record(domain, z.object({ username: z.string().min(1), password: z.string().min(1) }).strict())
      .default({})
      .describe(
        'Credentials by registry (host:port): sent when it asks for Basic auth, and to its token service',
      ),
    cacheDir: z
      .string()
      .min(1)
      .default('data/images')
      .describe('Image cache; a relative path resolves from the working directory'),
    platform: z
      .object({
        os: z.string().min(1).describe('Operating system of the images to pull (linux)'),
        architecture: z
          .string()
          .min(1)
          .describe(
            "CPU of the images to pull, as OCI names it (amd64, arm64); without platform, this host's",
          ),
        variant: z.string().min(1).optional().describe('CPU variant (v8), when one must match'),
      })
      .strict()
      .optional()
      .describe(
        "Platform to pick from an index, and to refuse images of another; this host's (linux, its CPU) by default",
      ),
    timeoutSeconds: z
      .number()
      .positive()
      .default(30)
      .describe(
        "Limit on each request for a manifest, config or token, and on the wait for a layer's first byte",
      ),
  })
  .strict()
  .superRefine((config, ctx) => {
    const { protocol, host } = new URL(config.registry);
    if (
      protocol === 'http:' &&
      !isLoopback(host) &&
      !config.insecure.map(normalDomain).includes(normalDomain(host))
    ) {
      ctx.addIssue({
        code: 'custom',
        path: ['registry'],
        message: `plain http is allowed only for a loopback registry or one listed in insecure (${host} is neither)`,
      });
    }
  });

export type OciRegistryConfig = z.infer<typeof ociRegistryConfig>;

export interface OciRegistryDeps {
  clock: Clock;
  fetch: Fetch;
  secrets: SecretRegistry;
}

/** The OCI distribution registry plugin: images pinned by manifest digest, kept as OCI image layouts. */
export class OciRegistry implements PackageRegistryV2, PluginLifecycle {
  readonly specVersion = 'v2' as const;
  readonly registryKind = 'oci' as const;
  readonly cache: ImageCache;
  private readonly registries: Registries;
  private readonly distribution: Distribution;
  private readonly platform: Platform;
  /** Refs being written, so that parallel installs of one record it once. */
  private readonly addingRefs = new SingleFlight();

  constructor(
    private readonly config: OciRegistryConfig,
    deps: OciRegistryDeps,
    private readonly logger: PluginLogger,
  ) {
    this.cache = new ImageCache(resolvePath(config.cacheDir), deps.clock);
    this.registries = new Registries(config);
    this.platform = config.platform ?? hostPlatform();
    const insecure = new Set(config.insecure.map(normalDomain));
    const credentials = Object.fromEntries(
      Object.entries(config.credentials).map(([host, value]) => [normalDomain(host), value]),
    );
    for (const { password } of Object.values(credentials)) deps.secrets.add(password);
    this.distribution = new Distribution({
      fetch: deps.fetch,
      clock: deps.clock,
      credentials,
      secrets: deps.secrets,
      plainHttpAllowed: (host) => isLoopback(host) || insecure.has(normalDomain(host)),
      timeoutMs: config.timeoutSeconds * 1000,
    });
  }

  async start(): Promise<void> {
    await this.cache.ready(this.logger);
    this.logger.info(
      { cacheDir: this.cache.root, registry: this.config.registry, platform: this.platform },
      'OCI image cache ready',
    );
  }

  /**
   * A tag to the digest of its image manifest for this platform (through an index when the tag names
   * one), or a digest to itself (or, for an index, its platform's manifest). When the registry cannot
   * be reached, what this cache last installed for the same name and tag answers.
   */
  async resolve(spec: PackageSpec): Promise<ResolvedPackage> {
    const repository = this.registries.repository(spec.name);
    checkReference(spec.name, spec.range);
    try {
      const digest = await this.resolveOnline(repository, spec.range);
      return { name: spec.name, version: spec.range, digest };
    } catch (err) {
      if (!(err instanceof OciRegistryError) || err.reason !== 'unavailable') throw err;
      const known = await this.latestInstalled(spec);
      if (!known) throw err;
      this.logger.warn(
        { package: `${spec.name}:${spec.range}`, digest: known.digest, err: err.message },
        'registry unreachable; resolved from the image installed last for this tag',
      );
      return known;
    }
  }

  async install(resolved: ResolvedPackage, entryPoint: EntryPoint): Promise<InstalledServer> {
    const repository = this.checkResolved(resolved);
    const label = `${resolved.name}:${resolved.version}`;
    checkEntryPoint(entryPoint, label);
    await this.cache.ready(this.logger);
    const image = await this.cache.install(resolved, {
      build: (staged) =>
        downloadImage({
          distribution: this.distribution,
          repository,
          digest: resolved.digest,
          platform: this.platform,
          dir: staged,
          label,
        }),
      label,
      logger: this.logger,
      noun: 'image',
      details: (image) => ({ digest: image.digest, layers: image.layers.length }),
    });
    const { name, version, digest } = resolved;
    const ref = await this.addingRefs.run(JSON.stringify([name, version, digest]), () =>
      this.cache.addRef(resolved),
    );
    return {
      ...ref,
      sizeBytes: image.sizeBytes,
      hasInstallScripts: false,
      launch: await launchOf(repository, image, entryPoint, this.cache.entryDir(image), label),
    };
  }

  async cacheStatus(): Promise<CacheContents> {
    await this.cache.ready(this.logger);
    const images = new Map((await this.cache.list()).map((image) => [image.digest, image]));
    const entries = (await this.cache.allRefs()).flatMap((ref) => {
      const image = images.get(ref.digest);
      return image ? [{ ...ref, sizeBytes: image.sizeBytes, hasInstallScripts: false }] : [];
    });
    // Refs of one image share it: its bytes count once.
    return cacheContents(
      entries,
      [...images.values()].reduce((sum, image) => sum + image.sizeBytes, 0),
    );
  }

  private async resolveOnline(repository: Repository, reference: string): Promise<string> {
    const label = `${repository.name}:${reference}`;
    const top = await this.distribution.manifest(repository, reference);
    let manifest = parseManifest(top.bytes, top.contentType, label);
    let digest = top.digest;
    if (isIndex(manifest)) {
      const chosen = choosePlatform(manifest, this.platform, label);
      const inner = await this.distribution.manifest(repository, chosen.digest);
      manifest = imageManifestOf(parseManifest(inner.bytes, inner.contentType, label), label);
      digest = inner.digest;
    }
    // The config says which platform the image is for; an image for another would not start here.
    const config = await this.distribution.blobBytes(repository, manifest.config, 'config', label);
    checkConfig(config, manifest, this.platform, label);
    return digest;
  }

  private async latestInstalled(spec: PackageSpec): Promise<ResolvedPackage | undefined> {
    const refs = (await this.cache.allRefs()).filter(
      (ref) => ref.name === spec.name && ref.version === spec.range,
    );
    refs.sort((a, b) => b.installedAt.localeCompare(a.installedAt));
    for (const ref of refs) {
      if (await this.cache.read(ref)) return { name: ref.name, version: ref.version, digest: ref.digest };
    }
    return undefined;
  }

  private checkResolved(resolved: ResolvedPackage): Repository {
    const repository = this.registries.repository(resolved.name);
    checkReference(resolved.name, resolved.version);
    if (!DIGEST.test(resolved.digest)) {
      throw invalidRequest(
        `${resolved.name}: not a sha256 manifest digest: ${JSON.stringify(resolved.digest)}`,
      );
    }
    return repository;
  }
}

export default definePlugin({
  kind: 'package-registry',
  name: 'registry-oci',
  specVersion: 'v2',
  description:
    'OCI distribution registries: images pinned by manifest digest, every blob sha256-verified, kept as OCI image layouts for offline loads',
  config: ociRegistryConfig,
  dependencies: { clock: coreServices.clock, fetch: coreServices.fetch, secrets: coreServices.secrets },
  provides: [provide(extensionPoints.registryKinds, 'oci')],
  create: ({ config, deps, logger }) => new OciRegistry(config, deps, logger),
});
