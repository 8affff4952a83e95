import Router from '@koa/router';
import type { Kernel } from '../kernel.ts';
import { SIGIL_VERSION } from './version.ts';

export { SIGIL_VERSION };

/**
 * Where both services answer health probes; its GET and HEAD are served whatever the `Host`, since
 * probes address a pod by its IP (what it shows is read-only: status, version, uptime, posture).
 */
export const HEALTH_PATH = '/health';

/** `/health`, shared by both services; `extra` adds service-specific health fields. */
export function healthRouter(
  service: 'runtime' | 'gateway',
  kernel: Kernel,
  extra: () => Promise<Record<string, unknown>> = () => Promise.resolve({}),
): Router {
  const router = new Router();
  const startedAt = kernel.clock.now().getTime();
  router.get(HEALTH_PATH, async (ctx) => {
    let database = 'ok';
    try {
      await kernel.db.raw('select 1');
    } catch {
      database = 'unreachable';
    }
    ctx.status = database === 'ok' ? 200 : 503;
    ctx.body = {
      status: database === 'ok' ? 'ok' : 'degraded',
      service,
      version: SIGIL_VERSION,
      uptimeSeconds: Math.floor((kernel.clock.now().getTime() - startedAt) / 1000),
      database,
      ...settingsAgreement(kernel, service),
      ...(await extra()),
    };
  });
  return router;
}

/**
 * Where replicas share the database: the fingerprint of this replica's settings for the service and
 * whether every live replica of it has the same (`false`: the logs name the ones that differ). Not a
 * reason to fail the probe: the balancer would take every replica out during a rolling change.
 */
function settingsAgreement(kernel: Kernel, service: string): { replicas?: object } {
  const settings = kernel.replica.settingsOf(service);
  if (settings === undefined) return {};
  return { replicas: { settingsFingerprint: settings.fingerprint, agreed: settings.agreed } };
}
