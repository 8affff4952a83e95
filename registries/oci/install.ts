import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { FILES_FILE, type ImageRecord } from './cache.ts';
import type { Distribution } from './distribution.ts';
import { DEFAULT_PATH, ImageFiles } from './filesystem.ts';
import { blobPath, makeBlobDir, writeLayout } from './layout.ts';
import {
  checkConfig,
  type Descriptor,
  imageManifestOf,
  parseManifest,
  type Platform,
  platformName,
} from './manifest.ts';
import type { Repository } from './reference.ts';

export interface ImageDownload {
  distribution: Distribution;
  repository: Repository;
  /** The image manifest's digest, as `resolve` gave it. */
  digest: string;
  platform: Platform;
  /** An empty staging directory: the layout is written into it. */
  dir: string;
  /** `name:version`, for messages. */
  label: string;
}

/** Layers downloaded at once: as `docker pull` does by default. */
const PARALLEL_LAYERS = 3;

/**
 * Downloads the image `digest` names into `dir` as an OCI image layout: its manifest, config and
 * every layer, each checked against its digest (the manifest against the pin itself, the blobs
 * against the manifest's descriptors) as it arrives, then lists the files the layers hold (for the
 * entry-point checks). Rejects on the first mismatch; the caller discards `dir`.
 */
export async function downloadImage(job: ImageDownload): Promise<Omit<ImageRecord, 'layout'>> {
  const { distribution, repository, digest, dir, label } = job;
  const fetched = await distribution.manifest(repository, digest);
  const manifest = imageManifestOf(parseManifest(fetched.bytes, fetched.contentType, label), label);
  const configBytes = await distribution.blobBytes(repository, manifest.config, 'config', label);
  const config = checkConfig(configBytes, manifest, job.platform, label);
  await makeBlobDir(dir);
  await writeFile(blobPath(dir, digest), fetched.bytes);
  await writeFile(blobPath(dir, manifest.config.digest), configBytes);

  // The same layer may stand twice in a manifest (an empty one, often): it is fetched once.
  const layers = [...new Map(manifest.layers.map((layer) => [layer.digest, layer])).values()];
  const queue = layers.map((layer, index): [Descriptor, string] => [
    layer,
    `layer ${index + 1}/${layers.length} ${layer.digest}`,
  ]);
  const worker = async () => {
    for (let next = queue.shift(); next; next = queue.shift()) {
      const [layer, what] = next;
      await distribution
        .blobToFile(repository, layer, what, label, blobPath(dir, layer.digest))
        .catch((err) => {
          queue.length = 0;
          throw err;
        });
    }
  };
  // Settled, not raced: no download may still be writing into `dir` when the caller removes it.
  const settled = await Promise.allSettled(
    Array.from({ length: Math.min(PARALLEL_LAYERS, queue.length) }, worker),
  );
  const failed = settled.find((result) => result.status === 'rejected');
  if (failed) throw failed.reason;

  const layerFiles = manifest.layers.map((layer) => blobPath(dir, layer.digest));
  const files = await ImageFiles.ofLayers(layerFiles).catch(() => undefined);
  await files?.write(join(dir, FILES_FILE));
  await writeLayout(dir, {
    manifest: { mediaType: manifest.mediaType, digest, size: fetched.bytes.length },
    platform: config.platform,
    config: manifest.config.digest,
    layers: manifest.layers.map((layer) => layer.digest),
  });
  return {
    digest,
    mediaType: manifest.mediaType,
    config: manifest.config.digest,
    layers: manifest.layers.map((layer) => layer.digest),
    platform: platformName(config.platform),
    workingDir: config.workingDir,
    bins: files?.executables(config.path ?? DEFAULT_PATH) ?? null,
    sizeBytes: fetched.bytes.length + configBytes.length + layers.reduce((sum, layer) => sum + layer.size, 0),
  };
}
