import Router from '@koa/router';
import type { Kernel } from '../kernel.ts';

export const SIGIL_VERSION = '0.1.0';

/** `/health`, shared by both services; `extra` adds service-specific health fields. */
export function healthRouter(
  service: 'runtime' | 'gateway',
  kernel: Kernel,
  extra: () => Promise<Record<string, unknown>> = () => Promise.resolve({}),
): Router {
  const router = new Router();
  const startedAt = kernel.clock.now().getTime();
  router.get('/health', async (ctx) => {
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
      ...(await extra()),
    };
  });
  return router;
}
