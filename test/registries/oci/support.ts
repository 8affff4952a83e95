import { type Clock, systemClock } from '../../../core/clock.ts';
import { type Logger, SecretRegistry } from '../../../core/log.ts';
import manifest, { type OciRegistry } from '../../../registries/oci/index.ts';
import { quietLogger } from '../../support/kernel.ts';

/**
 * The plugin made by its own manifest, as the plugin host makes it, and started: `options` are its
 * options, beside the core services it gets (the system clock, a quiet logger, a fresh secret
 * registry and the global fetch unless given).
 */
export async function openOciRegistry(
  options: Record<string, unknown> & { clock?: Clock; logger?: Logger; secrets?: SecretRegistry },
): Promise<OciRegistry> {
  const { clock = systemClock, logger = quietLogger(), secrets = new SecretRegistry(), ...config } = options;
  const instance = (await manifest.create({
    config: manifest.config.parse(config),
    deps: { clock, fetch: globalThis.fetch, secrets },
    logger,
  })) as OciRegistry;
  await instance.start();
  return instance;
}
