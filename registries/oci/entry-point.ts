import { join, posix } from 'node:path';
import type { EntryPoint, ImageLaunch } from '@sigil/plugin-api';
import { FILES_FILE, type ImageRecord } from './cache.ts';
import { invalidRequest, OciRegistryError } from './errors.ts';
import { ImageFiles } from './filesystem.ts';
import { pinnedImage, type Repository } from './reference.ts';

/** Executables a hint names at most: an image's PATH may hold hundreds. */
const HINT_BINS = 12;

/**
 * How to start an entry point of an installed image: a `bin` is an executable on the image's PATH,
 * a `path` a file read against its working directory, and neither keeps the image's own entrypoint.
 * `args` replace the image's CMD. Rejects with `not_found` when the image has no such executable or
 * file, or a `module` is asked for (an image has no Python module to run).
 */
export async function launchOf(
  repository: Repository,
  image: ImageRecord,
  entryPoint: EntryPoint,
  layout: string,
  label: string,
): Promise<ImageLaunch> {
  checkEntryPoint(entryPoint, label);
  const entrypoint = await entrypointOf(image, entryPoint, layout, label);
  return {
    kind: 'image',
    image: pinnedImage(repository, image.digest),
    ...(entrypoint === undefined ? {} : { entrypoint }),
    args: [...entryPoint.args],
    layout,
  };
}

/** The form every entry point must have, checked before anything is downloaded. */
export function checkEntryPoint(entryPoint: EntryPoint, label: string): void {
  const named = [entryPoint.bin, entryPoint.path, entryPoint.module].filter((value) => value !== undefined);
  if (named.length > 1) {
    throw invalidRequest(`${label}: an entry point names at most one of bin, path and module`);
  }
}

async function entrypointOf(
  image: ImageRecord,
  { bin, path, module }: EntryPoint,
  layout: string,
  label: string,
): Promise<string[] | undefined> {
  const missing = (what: string, detail: Record<string, string>) =>
    new OciRegistryError(
      'not_found',
      `${label} has no ${what}`,
      { package: label, entryPoint: detail },
      { hint: hintOf(image) },
    );
  if (module !== undefined)
    throw missing(`Python module ${module} to run: it is a container image`, { module });
  if (bin !== undefined) {
    if (image.bins !== null && !image.bins.includes(bin))
      throw missing(`executable ${bin} on its PATH`, { bin });
    return [bin];
  }
  if (path !== undefined) {
    const file = posix.resolve(image.workingDir, path);
    if (image.bins !== null && !(await ImageFiles.read(join(layout, FILES_FILE))).isFile(file)) {
      throw missing(`file ${file}`, { path });
    }
    return [file];
  }
  return undefined;
}

function hintOf(image: ImageRecord): string {
  const own = "Name nothing to run the image's own entrypoint";
  if (!image.bins?.length) return `${own}, or a file of the image with path`;
  const shown = image.bins.slice(0, HINT_BINS).join(', ');
  const more = image.bins.length > HINT_BINS ? `, … (${image.bins.length} in all)` : '';
  return `${own}, a file of it with path, or an executable on its PATH with bin: ${shown}${more}`;
}
