import Koa from 'koa';
import type Router from '@koa/router';
import { bodyParser } from '@koa/bodyparser';
import type { Logger } from '../log.ts';
import { errorHandler } from './errors.ts';
import { HttpMetrics } from './metrics.ts';
import { requestContext } from './request-context.ts';

export interface HttpAppOptions {
  service: string;
  logger: Logger;
  bodyLimitBytes: number;
  /** Routers in the order they should match. */
  routers: readonly Router[];
  /** Paths whose handlers read the raw body themselves (e.g. JSON-RPC, which answers bad JSON its own way). */
  rawBodyPaths?: RegExp;
  /** Middleware to run after parsing and before the routers (e.g. authentication). */
  middleware?: readonly Koa.Middleware[];
}

export interface HttpApp {
  app: Koa;
  metrics: HttpMetrics;
}

/**
 * The one place a service's middleware is assembled, in this order: request id and log line,
 * metrics (served at `/metrics`), error shape, body parsing with a size limit, the service's middleware,
 * its routes.
 */
export function createHttpApp(options: HttpAppOptions): HttpApp {
  const app = new Koa({ proxy: false });
  app.silent = true;
  const metrics = new HttpMetrics(options.service);
  app.use(requestContext(options.logger));
  app.use(metrics.middleware());
  app.use(errorHandler(options.logger));
  const rawBodyPaths = options.rawBodyPaths;
  if (rawBodyPaths) {
    app.use((ctx, next) => {
      if (rawBodyPaths.test(ctx.path)) ctx.disableBodyParser = true;
      return next();
    });
  }
  app.use(
    bodyParser({
      enableTypes: ['json'],
      jsonLimit: options.bodyLimitBytes,
      encoding: 'utf-8',
    }),
  );
  app.use(async (ctx, next) =>
    ctx.method === 'GET' && ctx.path === '/metrics' ? metrics.render(ctx) : next(),
  );
  for (const middleware of options.middleware ?? []) app.use(middleware);
  for (const router of options.routers) {
    app.use(router.routes());
    app.use(router.allowedMethods({ throw: true }));
  }
  return { app, metrics };
}
