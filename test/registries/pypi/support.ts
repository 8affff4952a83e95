import { fileURLToPath } from 'node:url';
import { ManualClock } from '../../../core/clock.ts';
import type { Logger } from '../../../core/log.ts';
import manifest, { type PypiRegistry } from '../../../registries/pypi/index.ts';
import { quietLogger } from '../../support/kernel.ts';

/** The Python projects of the tests: a stdlib-only MCP server and the package it depends on. */
export const FIXTURES = fileURLToPath(new URL('../../fixtures/python/', import.meta.url));

/** The plugin made by its own manifest, as the plugin host makes it, and started. */
export async function openRegistry(options: {
  index: string;
  cacheDir: string;
  logger?: Logger;
}): Promise<PypiRegistry> {
  const { logger = quietLogger(), ...config } = options;
  const instance = (await manifest.create({
    config: manifest.config.parse(config),
    deps: { clock: new ManualClock(new Date('2026-03-01T12:00:00Z')), fetch: globalThis.fetch },
    logger,
  })) as PypiRegistry;
  await instance.start();
  return instance;
}
