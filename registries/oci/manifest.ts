import { z } from 'zod';
import { OciRegistryError } from './errors.ts';
import { DIGEST } from './reference.ts';

/** The manifest formats a container engine runs, in the order the registry is asked for them. */
export const MEDIA_TYPES = {
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
} as const;
const MANIFESTS: readonly string[] = [MEDIA_TYPES.ociManifest, MEDIA_TYPES.dockerManifest];
const INDEXES: readonly string[] = [MEDIA_TYPES.ociIndex, MEDIA_TYPES.dockerList];
const IMAGE_CONFIGS: readonly string[] = [
  'application/vnd.oci.image.config.v1+json',
  'application/vnd.docker.container.image.v1+json',
];
/** Signed schema 1 manifests name layers by a digest of their own making and no config: never trusted. */
const SCHEMA_1 = [
  'application/vnd.docker.distribution.manifest.v1+json',
  'application/vnd.docker.distribution.manifest.v1+prettyjws',
];
export const MANIFEST_ACCEPT = Object.values(MEDIA_TYPES).join(', ');
/** What the distribution spec tells registries to accept at most; a larger answer is refused unread. */
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;

export interface Platform {
  os: string;
  architecture: string;
  variant?: string | undefined;
}

const platform = z.object({ os: z.string(), architecture: z.string(), variant: z.string().optional() });
const descriptor = z.object({
  mediaType: z.string(),
  digest: z.string().regex(DIGEST, 'a sha256 digest'),
  size: z.number().int().nonnegative(),
  platform: platform.optional(),
});
const imageManifest = z.object({
  schemaVersion: z.literal(2),
  mediaType: z.string().optional(),
  config: descriptor,
  layers: z.array(descriptor),
});
const imageIndex = z.object({
  schemaVersion: z.literal(2),
  mediaType: z.string().optional(),
  manifests: z.array(descriptor),
});
const imageConfig = z.object({
  ...platform.shape,
  rootfs: z.object({ type: z.literal('layers'), diff_ids: z.array(z.string()) }),
  config: z.object({ WorkingDir: z.string().optional(), Env: z.array(z.string()).nullish() }).nullish(),
});

/** What the rest of the plugin needs from an image's config. */
export interface ImageConfig {
  platform: Platform;
  workingDir: string;
  /** The directories of the image's PATH, where a `bin` entry point is looked up; undefined when it sets none. */
  path: string[] | undefined;
}

export type Descriptor = z.infer<typeof descriptor>;
export type ImageManifest = z.infer<typeof imageManifest> & { mediaType: string };
export type ImageIndex = z.infer<typeof imageIndex> & { mediaType: string };

/** Node's name of the host's CPU as OCI platforms name it. */
const ARCHITECTURES: Partial<Record<NodeJS.Architecture, string>> = {
  x64: 'amd64',
  arm64: 'arm64',
  arm: 'arm',
  ia32: '386',
  ppc64: 'ppc64le',
  s390x: 's390x',
  riscv64: 'riscv64',
};

/** The platform of the engines on this host: images run in Linux, on the host's CPU. */
export const hostPlatform = (): Platform => ({
  os: 'linux',
  architecture: ARCHITECTURES[process.arch] ?? process.arch,
});

export const platformName = (p: Platform): string =>
  [p.os, p.architecture, p.variant].filter(Boolean).join('/');

const invalid = (image: string, why: string, hint?: string) =>
  new OciRegistryError(
    'invalid_metadata',
    `${image}: ${why}`,
    { package: image },
    hint === undefined ? {} : { hint },
  );

/**
 * The manifest or index in `bytes`, by its own `mediaType` (the Content-Type header when it has
 * none). Schema 1 and anything that is not a container image are refused as `invalid_metadata`.
 */
export function parseManifest(
  bytes: Buffer,
  contentType: string | null,
  image: string,
): ImageManifest | ImageIndex {
  let body: { mediaType?: unknown; schemaVersion?: unknown };
  try {
    body = JSON.parse(bytes.toString('utf8')) as typeof body;
  } catch {
    throw invalid(image, 'the registry sent a manifest that is not JSON');
  }
  const mediaType =
    typeof body.mediaType === 'string' ? body.mediaType : (contentType?.split(';')[0]?.trim() ?? '');
  if (body.schemaVersion === 1 || SCHEMA_1.includes(mediaType)) {
    throw invalid(
      image,
      'the registry has only a schema 1 manifest, which is refused (its layers are not content-addressed)',
      'Push the image again with a current client (Docker 17.03 or later, buildah, skopeo)',
    );
  }
  const schema = INDEXES.includes(mediaType)
    ? imageIndex
    : MANIFESTS.includes(mediaType)
      ? imageManifest
      : undefined;
  if (!schema)
    throw invalid(image, `the registry sent a manifest of an unknown type (${mediaType || 'none'})`);
  const parsed = schema.safeParse(body);
  if (!parsed.success) {
    throw invalid(image, `the registry sent a malformed ${mediaType}: ${z.prettifyError(parsed.error)}`);
  }
  const manifest = { ...parsed.data, mediaType };
  if ('config' in manifest && !IMAGE_CONFIGS.includes(manifest.config.mediaType)) {
    throw invalid(image, `not a container image (its config is ${manifest.config.mediaType})`);
  }
  return manifest;
}

export const isIndex = (manifest: ImageManifest | ImageIndex): manifest is ImageIndex =>
  'manifests' in manifest;

/** The image manifest, refusing an index (inside an index, or a digest that `resolve` did not give). */
export function imageManifestOf(manifest: ImageManifest | ImageIndex, image: string): ImageManifest {
  if (!isIndex(manifest)) return manifest;
  throw invalid(image, 'an index where an image manifest was expected');
}

/**
 * The index's image for `wanted`: same os and architecture, and variant when one is wanted. The
 * attestation manifests that build tools add (platform `unknown/unknown`) never match.
 */
export function choosePlatform(index: ImageIndex, wanted: Platform, image: string): Descriptor {
  const images = index.manifests.filter((entry) => MANIFESTS.includes(entry.mediaType));
  const chosen = images.find(
    ({ platform: p }) =>
      p?.os === wanted.os &&
      p.architecture === wanted.architecture &&
      (wanted.variant === undefined || p.variant === wanted.variant),
  );
  if (!chosen) {
    const offered = images.flatMap((entry) => (entry.platform ? [platformName(entry.platform)] : []));
    throw new OciRegistryError(
      'not_found',
      `${image} has no image for ${platformName(wanted)}`,
      { package: image, platform: platformName(wanted), platforms: offered },
      { hint: `The index offers ${offered.join(', ') || 'no platform'}` },
    );
  }
  return chosen;
}

/**
 * Checks an image's config (already verified against its digest) against its manifest and the
 * platform it must run on.
 */
export function checkConfig(
  bytes: Buffer,
  manifest: ImageManifest,
  wanted: Platform,
  image: string,
): ImageConfig {
  let config: z.infer<typeof imageConfig>;
  try {
    config = imageConfig.parse(JSON.parse(bytes.toString('utf8')));
  } catch {
    throw invalid(image, 'its config is not an image config (os, architecture, rootfs)');
  }
  if (config.rootfs.diff_ids.length !== manifest.layers.length) {
    throw invalid(
      image,
      `its config lists ${config.rootfs.diff_ids.length} layers, its manifest ${manifest.layers.length}`,
    );
  }
  if (
    config.os !== wanted.os ||
    config.architecture !== wanted.architecture ||
    (wanted.variant !== undefined && config.variant !== wanted.variant)
  ) {
    throw new OciRegistryError(
      'not_found',
      `${image} is built for ${platformName(config)}, not ${platformName(wanted)}`,
      { package: image, platform: platformName(wanted), platforms: [platformName(config)] },
    );
  }
  const { os, architecture, variant } = config;
  const path = config.config?.Env?.find((variable) => variable.startsWith('PATH='));
  return {
    platform: { os, architecture, variant },
    workingDir: config.config?.WorkingDir || '/',
    path: path?.slice('PATH='.length).split(':').filter(Boolean),
  };
}
