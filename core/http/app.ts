import type { RequestListener } from 'node:http';
import Koa from 'koa';
import type Router from '@koa/router';
import { bodyParser } from '@koa/bodyparser';
import type { Logger } from '../log.ts';
import { errorHandler } from './errors.ts';
import { HttpMetrics } from './metrics.ts';
import { laneServer, type Lane } from './lane.ts';
import { RequestLogging, requestContext } from './request-context.ts';

export interface HttpAppOptions {
  service: string;
  logger: Logger;
  bodyLimitBytes: number;
  /** Routers in the order they should match. */
  routers: readonly Router[];
  /** Middleware to run after parsing and before the routers (e.g. authentication). */
  middleware?: readonly Koa.Middleware[];
  /** Routes served without Koa, with the same request id, access line, metrics and error shape. */
  lane?: Lane;
}

export interface HttpApp {
  app: Koa;
  metrics: HttpMetrics;
  /** The service's request listener: its lane's routes, then the app. */
  callback(): RequestListener;
}

/**
 * The one place a service's middleware is assembled, in this order: request id and log line,
 * metrics (served at `/metrics`), error shape, body parsing with a size limit, the service's middleware,
 * its routes; and, before all of it, the routes of its lane.
 */
export function createHttpApp(options: HttpAppOptions): HttpApp {
  const app = new Koa({ proxy: false });
  app.silent = true;
  const metrics = new HttpMetrics(options.service);
  const logging = new RequestLogging(options.logger);
  app.use(requestContext(logging));
  app.use(metrics.middleware());
  app.use(errorHandler(options.logger));
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
  const { lane } = options;
  if (!lane) return { app, metrics, callback: () => app.callback() };
  const laned = laneServer(lane, { logging, metrics, bodyLimitBytes: options.bodyLimitBytes });
  return {
    app,
    metrics,
    callback: () => {
      const served = app.callback();
      return (req, res) => {
        const match = laned.match(req.method, req.url);
        if (match) laned.serve(req, res, match);
        else void served(req, res);
      };
    },
  };
}
