import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create as createTar } from 'tar';
import { SigilError } from '@sigil/plugin-api';

/**
 * An image out of an OCI image layout (the directory a registry plugin verified it into), as the
 * Docker engine loads one: the engine (20.10) reads `docker save` archives, not layouts, so the
 * archive is made on the fly from the layout's own blobs, with a `manifest.json` naming the config
 * and layers of the pinned manifest. The manifest is found by the pinned digest and its bytes
 * checked against it; the engine checks each layer against the config's diff_ids and names the
 * image by its config's digest, which is returned, so what runs is what was pinned.
 */

const INDEX_TYPES = new Set([
  'application/vnd.oci.image.index.v1+json',
  'application/vnd.docker.distribution.manifest.list.v2+json',
]);

interface Descriptor {
  mediaType?: string;
  digest: string;
  platform?: { os?: string; architecture?: string };
}

interface Manifest {
  mediaType?: string;
  manifests?: Descriptor[];
  config?: Descriptor;
  layers?: Descriptor[];
}

export interface LayoutImage {
  /** `sha256:<hex>` of the image's config: the engine's id for the image once loaded. */
  configDigest: string;
  /** Paths of the config and layer blobs, relative to the layout. */
  config: string;
  layers: string[];
}

/** GOARCH names of the engine's `uname -m`. */
const GO_ARCH: Readonly<Record<string, string>> = { x86_64: 'amd64', aarch64: 'arm64' };

/** The image of `layout` that `digest` pins (a manifest, or an index holding one for `architecture`). */
export function findLayoutImage(layout: string, digest: string, architecture: string): LayoutImage {
  let manifest = readBlob(layout, digest);
  if (INDEX_TYPES.has(manifest.mediaType ?? '') || (manifest.manifests && !manifest.config)) {
    const arch = GO_ARCH[architecture] ?? architecture;
    const entry = manifest.manifests?.find(
      (m) => (m.platform?.os ?? 'linux') === 'linux' && (m.platform?.architecture ?? arch) === arch,
    );
    if (!entry) throw layoutError(layout, `the index ${digest} has no image for linux/${arch}`);
    manifest = readBlob(layout, entry.digest);
  }
  if (!manifest.config || !manifest.layers)
    throw layoutError(layout, `${digest} is neither an image manifest nor an index`);
  return {
    configDigest: manifest.config.digest,
    config: blobPath(manifest.config.digest),
    layers: manifest.layers.map((layer) => blobPath(layer.digest)),
  };
}

/** A `docker load` archive of `image`, streamed from the layout's blobs. */
export function loadArchive(
  layout: string,
  image: LayoutImage,
): { stream: NodeJS.ReadableStream; done: () => void } {
  const staging = mkdtempSync(join(tmpdir(), 'sigil-docker-load-'));
  writeFileSync(
    join(staging, 'manifest.json'),
    JSON.stringify([{ Config: image.config, RepoTags: null, Layers: image.layers }]),
  );
  symlinkSync(join(layout, 'blobs'), join(staging, 'blobs'));
  const stream = createTar({ cwd: staging, follow: true, portable: true }, [
    'manifest.json',
    image.config,
    ...new Set(image.layers),
  ]);
  return {
    stream: stream as unknown as NodeJS.ReadableStream,
    done: () => rmSync(staging, { recursive: true, force: true }),
  };
}

const blobPath = (digest: string) => {
  const [algorithm, hex] = digest.split(':');
  return `blobs/${algorithm}/${hex}`;
};

/** A manifest or index blob, checked against its digest. */
function readBlob(layout: string, digest: string): Manifest {
  if (!/^sha256:[0-9a-f]{64}$/.test(digest)) throw layoutError(layout, `unsupported digest ${digest}`);
  let bytes: Buffer;
  try {
    bytes = readFileSync(join(layout, blobPath(digest)));
  } catch {
    throw layoutError(layout, `no blob ${digest}`);
  }
  const actual = `sha256:${createHash('sha256').update(bytes).digest('hex')}`;
  if (actual !== digest) throw layoutError(layout, `the blob ${digest} hashes to ${actual}`);
  try {
    return JSON.parse(bytes.toString('utf8')) as Manifest;
  } catch {
    throw layoutError(layout, `the blob ${digest} is not JSON`);
  }
}

const layoutError = (layout: string, cause: string) =>
  new SigilError('unavailable', `cannot load the image from the layout ${layout}: ${cause}`, {
    details: { reason: 'image_layout' },
  });
