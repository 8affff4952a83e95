import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { PluginLogger } from '@sigil/plugin-api';
import type { Engine, EngineConnection } from './engine.ts';
import { instanceDirGone, LABELS, ownerGone, type Owner } from './owner.ts';

/**
 * Removes the containers (running or not) that a gateway on this host left behind when it died
 * without its watchdog cleaning up (both killed at once, a host crash): those whose owner, by their
 * labels, ran here and runs no more; and those owners' state directories. Returns how many
 * containers were removed.
 */
export async function reapLeftovers(
  engine: Engine,
  owner: Owner,
  stateDir: string,
  logger: PluginLogger,
): Promise<number> {
  let entries: string[] = [];
  try {
    entries = readdirSync(stateDir);
  } catch {
    // no state dir yet
  }
  for (const entry of entries) {
    if (instanceDirGone(entry, owner)) rmSync(join(stateDir, entry), { recursive: true, force: true });
  }
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
          // Gone meanwhile (404) or going (409: with force, Docker's only conflict is "removal …
          // already in progress"): another gateway starting up, or a watchdog, got there first.
          (error: { statusCode?: number }) =>
            error.statusCode === 404 || error.statusCode === 409
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

const WATCHDOG = fileURLToPath(new URL('./watchdog.cjs', import.meta.url));

/**
 * Starts the watchdog (watchdog.cjs) of one runtime instance: when this process ends, however it
 * ends, the watchdog removes the instance's containers and state directory. Its stdin is the pipe
 * whose closing tells it; `stdin.end()` on the returned process is a normal goodbye.
 */
export function startWatchdog(options: {
  connection: EngineConnection;
  instanceLabel: string;
  stateDir: string;
  logger: PluginLogger;
}): ChildProcess {
  const { logger, ...argument } = options;
  // Its own session: a signal to the gateway's process group does not reach it.
  const watchdog = spawn(process.execPath, [WATCHDOG, JSON.stringify(argument)], {
    detached: true,
    stdio: ['pipe', 'ignore', 'ignore'],
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
  });
  watchdog.on('error', (error) =>
    logger.error({ error: error.message }, 'the container watchdog did not start'),
  );
  // Neither it nor its pipe keeps this process alive.
  watchdog.unref();
  (watchdog.stdin as Socket | null)?.unref();
  return watchdog;
}
