import type Docker from 'dockerode';
import { SigilError } from '@sigil/plugin-api';
import type { Engine } from './engine.ts';
import { findLayoutImage, loadArchive } from './oci-layout.ts';

/** What a container of an image needs to know of it. */
export interface ImageConfig {
  /** The engine's id (`sha256:` of the config): what the container is created from. */
  id: string;
  entrypoint: string[];
  cmd: string[];
  workingDir: string;
}

/**
 * Finds images in the engine: by reference, else (for a digest-pinned image) loaded from its OCI
 * layout when the launch gives one, else pulled by digest. What an image reference resolved to is
 * kept: a digest names the same image forever; a tag (an operator's host image) is looked up again
 * only when the engine no longer has what it named.
 */
export class Images {
  private readonly known = new Map<string, ImageConfig>();
  private readonly pending = new Map<string, Promise<ImageConfig>>();
  private readonly shells = new Map<string, Promise<boolean>>();

  constructor(
    private readonly engine: Engine,
    private readonly pullTimeoutMs: number,
    private readonly architecture: () => string,
  ) {}

  /** The image `reference` names; loaded from `layout` or pulled when the engine lacks it. */
  resolve(reference: string, layout?: string): Promise<ImageConfig> {
    const known = this.known.get(reference);
    if (known) return Promise.resolve(known);
    let pending = this.pending.get(reference);
    if (!pending) {
      pending = this.find(reference, layout).finally(() => this.pending.delete(reference));
      this.pending.set(reference, pending);
    }
    return pending;
  }

  /**
   * Whether image `id` has `/bin/sh` (for the stdio pipes and the environment over stdin), found
   * once per image by asking the engine about the path in a container that is never started.
   */
  hasShell(id: string, labels: Record<string, string>): Promise<boolean> {
    let known = this.shells.get(id);
    if (!known) {
      known = this.lookForShell(id, labels);
      this.shells.set(id, known);
      known.catch(() => this.shells.delete(id));
    }
    return known;
  }

  private async lookForShell(id: string, labels: Record<string, string>): Promise<boolean> {
    const container = await this.engine.call(`to create a container of ${id}`, () =>
      this.engine.api.createContainer({
        Image: id,
        Entrypoint: ['/bin/sh'],
        Labels: labels,
        NetworkDisabled: true,
        HostConfig: { NetworkMode: 'none', LogConfig: { Type: 'none', Config: {} } },
      }),
    );
    try {
      await container.infoArchive({ path: '/bin/sh' });
      return true;
    } catch (error) {
      if ((error as { statusCode?: number }).statusCode === 404) return false;
      throw this.engine.failure(`to look for /bin/sh in ${id}`, error);
    } finally {
      await container.remove({ force: true }).catch(() => undefined);
    }
  }

  /** Forgets `reference` (the engine said it has no such image any more). */
  forget(reference: string): void {
    this.known.delete(reference);
  }

  private async find(reference: string, layout: string | undefined): Promise<ImageConfig> {
    let found = await this.inspect(reference);
    if (!found) {
      const digest = /@(sha256:[0-9a-f]{64})$/.exec(reference)?.[1];
      if (digest && layout) found = await this.load(reference, layout, digest);
      else if (digest) found = await this.pull(reference);
      else {
        throw new SigilError(
          'unavailable',
          `the Docker engine at ${this.engine.address} has no image ${reference} (a tag is never pulled: build or load it there, or name it by digest)`,
          { details: { reason: 'image_missing', image: reference } },
        );
      }
    }
    this.known.set(reference, found);
    return found;
  }

  private async inspect(reference: string): Promise<ImageConfig | undefined> {
    try {
      const info = await this.engine.api.getImage(reference).inspect();
      return {
        id: info.Id,
        entrypoint: info.Config.Entrypoint ? [...(info.Config.Entrypoint as string[])] : [],
        cmd: info.Config.Cmd ? [...info.Config.Cmd] : [],
        workingDir: info.Config.WorkingDir || '/',
      };
    } catch (error) {
      if ((error as { statusCode?: number }).statusCode === 404) return undefined;
      throw this.engine.failure(`to inspect the image ${reference}`, error);
    }
  }

  private async load(reference: string, layout: string, digest: string): Promise<ImageConfig> {
    const image = findLayoutImage(layout, digest, this.architecture());
    // Loaded before (by another runtime, or under another name): the config digest is the image.
    const present = await this.inspect(image.configDigest);
    if (present) return present;
    const archive = loadArchive(layout, image);
    try {
      const progress = await this.engine.call(`to load ${reference} from ${layout}`, () =>
        this.engine.streams.loadImage(archive.stream, { quiet: true }),
      );
      await this.follow(progress, `loading ${reference} from ${layout}`, undefined);
    } finally {
      archive.done();
    }
    const loaded = await this.inspect(image.configDigest);
    if (!loaded) {
      throw new SigilError(
        'unavailable',
        `the Docker engine at ${this.engine.address} loaded ${layout} but has no image ${image.configDigest} (the pinned config)`,
        { details: { reason: 'image_layout' } },
      );
    }
    return loaded;
  }

  private async pull(reference: string): Promise<ImageConfig> {
    const progress = await this.engine.call(`to pull ${reference}`, () =>
      this.engine.streams.pull(reference),
    );
    await this.follow(progress, `pulling ${reference}`, this.pullTimeoutMs);
    const pulled = await this.inspect(reference);
    if (!pulled) {
      throw new SigilError('unavailable', `the Docker engine pulled ${reference} but does not list it`, {
        details: { reason: 'image_pull' },
      });
    }
    return pulled;
  }

  /** Reads a pull's or load's progress to its end; an error event in it fails the step. */
  private follow(
    progress: NodeJS.ReadableStream,
    doing: string,
    timeoutMs: number | undefined,
  ): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer =
        timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              (progress as NodeJS.ReadableStream & { destroy?: () => void }).destroy?.();
              reject(
                new SigilError('unavailable', `${doing} took longer than ${timeoutMs} ms`, {
                  details: { reason: 'image_pull' },
                }),
              );
            }, timeoutMs);
      (this.engine.streams as Docker).modem.followProgress(
        progress,
        (error: Error | null, events: { error?: string; errorDetail?: { message?: string } }[]) => {
          clearTimeout(timer);
          const failed = events?.find((event) => event.error || event.errorDetail);
          if (error || failed) {
            reject(
              new SigilError(
                'unavailable',
                `${doing} failed on the Docker engine at ${this.engine.address}: ${failed?.errorDetail?.message ?? failed?.error ?? error?.message}`,
                { details: { reason: 'image_pull' } },
              ),
            );
          } else resolve();
        },
      );
    });
  }
}
