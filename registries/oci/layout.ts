import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type Descriptor, MEDIA_TYPES, type Platform } from './manifest.ts';

/**
 * An image on disk as an OCI image layout (image-spec `image-layout.md`): `oci-layout`, `index.json`
 * naming the one manifest, and every blob under `blobs/sha256/`. Beside them, `manifest.json` of the
 * `docker save` format pointing at the same blobs, so an engine that cannot read an OCI layout
 * (Docker before 25, whose `docker load` reads only that file) loads the same directory, tarred.
 */

export const blobPath = (dir: string, digest: string): string => join(dir, 'blobs', ...digest.split(':'));

export async function makeBlobDir(dir: string): Promise<void> {
  await mkdir(join(dir, 'blobs', 'sha256'), { recursive: true });
}

export interface LayoutImage {
  manifest: Omit<Descriptor, 'platform'>;
  platform: Platform;
  config: string;
  layers: readonly string[];
}

/** Writes the layout's metadata files; the blobs must be in place already. */
export async function writeLayout(dir: string, image: LayoutImage): Promise<void> {
  const relative = (digest: string) => ['blobs', ...digest.split(':')].join('/');
  const index = {
    schemaVersion: 2,
    mediaType: MEDIA_TYPES.ociIndex,
    manifests: [{ ...image.manifest, platform: image.platform }],
  };
  const dockerSave = [{ Config: relative(image.config), RepoTags: [], Layers: image.layers.map(relative) }];
  await Promise.all([
    writeFile(join(dir, 'oci-layout'), `${JSON.stringify({ imageLayoutVersion: '1.0.0' })}\n`),
    writeFile(join(dir, 'index.json'), `${JSON.stringify(index, null, 2)}\n`),
    writeFile(join(dir, 'manifest.json'), `${JSON.stringify(dockerSave, null, 2)}\n`),
  ]);
}
