import type { PluginLogger } from '@sigil/plugin-api';
import type { Engine } from './engine.ts';
import { LABELS, ownerGone, type Owner } from './owner.ts';

/**
 * Removes the containers (running or not) that a gateway on this host left behind when it died
 * without its watchdog cleaning up (both killed at once, a host crash): those whose owner, by their
 * labels, ran here and runs no more. Returns how many were removed.
 */
export async function reapLeftovers(engine: Engine, owner: Owner, logger: PluginLogger): Promise<number> {
  const containers = await engine.call('to list containers', () =>
    engine.api.listContainers({ all: true, filters: { label: [LABELS.sandbox] } }),
  );
  const left = containers.filter((container) => ownerGone(container.Labels, owner));
  const removed = await Promise.all(
    left.map((container) =>
      engine.api
        .getContainer(container.Id)
        .remove({ force: true, v: true })
        .then(
          () => true,
          // Gone meanwhile (another gateway starting up reaped it too), or the engine refused.
          (error: { statusCode?: number }) =>
            error.statusCode === 404
              ? false
              : Promise.reject(engine.failure('to remove a leftover container', error)),
        ),
    ),
  );
  const count = removed.filter(Boolean).length;
  if (count > 0) {
    logger.warn(
      { removed: count, containers: left.map((c) => c.Names[0]) },
      'removed containers left behind by a gateway that is gone',
    );
  }
  return count;
}

/** The uids that live containers of this plugin on the engine hold (any gateway's). */
export async function uidsInUse(engine: Engine): Promise<Set<number>> {
  const containers = await engine.call('to list containers', () =>
    engine.api.listContainers({ all: true, filters: { label: [LABELS.uid] } }),
  );
  return new Set(containers.map((container) => Number(container.Labels[LABELS.uid])));
}
