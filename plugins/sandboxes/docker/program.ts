import { existsSync, statSync } from 'node:fs';
import type Docker from 'dockerode';
import { SigilError } from '@sigil/plugin-api';
import type { DockerSandboxConfig } from './config.ts';
import { readOnlyBind } from './container-config.ts';
import type { Engine } from './engine.ts';
import type { Images } from './images.ts';
import type { CheckedSpec } from './spec.ts';

/** How a host program is started in its interpreter's image. */
const INTERPRETERS = { node: 'node', python: 'python3' } as const;

/** What a container runs: the image, its command, mounts, working directory and the launch's env. */
export interface Program {
  /** The image as the launch or the config names it. */
  reference: string;
  /** The engine's id of it. */
  image: string;
  command: string[];
  workingDir: string;
  mounts: Docker.MountSettings[];
  env: Readonly<Record<string, string>>;
}

export async function resolveProgram(
  launch: CheckedSpec['launch'],
  { config, engine, images }: { config: DockerSandboxConfig; engine: Engine; images: Images },
): Promise<Program> {
  if (launch.kind === 'image') {
    const image = await images.resolve(launch.image, launch.layout);
    const entrypoint = launch.entrypoint ?? image.entrypoint;
    // As the engine does: an entrypoint given replaces the image's command too.
    const cmd = launch.entrypoint || launch.args.length > 0 ? launch.args : image.cmd;
    const command = [...entrypoint, ...cmd];
    if (command.length === 0) {
      throw new SigilError(
        'invalid_request',
        `the image ${launch.image} has no entrypoint or command, and the launch gives none`,
        {
          details: { reason: 'no_command' },
        },
      );
    }
    return {
      reference: launch.image,
      image: image.id,
      command,
      workingDir: launch.cwd ?? image.workingDir,
      mounts: [],
      env: launch.env ?? {},
    };
  }
  const reference = config.images[launch.runtime];
  if (reference === undefined) {
    throw new SigilError(
      'unavailable',
      `this Docker sandbox has no image for ${launch.runtime} programs (set images.${launch.runtime})`,
      { details: { reason: 'interpreter_missing', runtime: launch.runtime } },
    );
  }
  if (!engine.local) {
    throw new SigilError(
      'unavailable',
      `host programs need a local Docker engine (the install root is bound from this host); ${engine.address} is remote: run an image instead`,
      { details: { reason: 'host_program_needs_local_engine' } },
    );
  }
  for (const path of [launch.root, ...(launch.readOnlyPaths ?? [])]) {
    if (!existsSync(path)) {
      throw new SigilError('invalid_request', `sandbox spec: ${path} does not exist on this host`, {
        details: { reason: 'path_missing' },
      });
    }
  }
  // The container's user is no owner or group member of the install root: the engine binds it as
  // root, but only what others may read is readable inside.
  if ((statSync(launch.root).mode & 0o005) !== 0o005) {
    throw new SigilError(
      'invalid_request',
      `sandbox spec: the install root ${launch.root} is not readable and searchable by others (mode ${(statSync(launch.root).mode & 0o777).toString(8)}), so the container's user cannot read it`,
      { details: { reason: 'install_root_unreadable' } },
    );
  }
  const image = await images.resolve(reference);
  const command =
    launch.runtime === 'binary'
      ? [launch.command as string, ...launch.args]
      : [INTERPRETERS[launch.runtime], ...launch.args];
  const extra = (launch.readOnlyPaths ?? []).filter(
    (path) => !path.startsWith(`${launch.root}/`) && path !== launch.root,
  );
  return {
    reference,
    image: image.id,
    command,
    workingDir: launch.cwd ?? launch.root,
    mounts: [launch.root, ...new Set(extra)].map(readOnlyBind),
    env: launch.env ?? {},
  };
}
