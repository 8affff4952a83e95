import type { RequestListener } from 'node:http';
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
  /** Requests served by a chain of their own, shorter than the app's (see `HotRoutes`). */
  hotRoutes?: HotRoutes;
}

/**
 * The routes of a service's busiest endpoint, served by a chain of their own: the core middleware
 * (request id and log line, metrics, error shape), then `middleware` and `router` only. No body
 * parsing, and none of the other routers to match first: on a gateway busy with tool calls, the full
 * chain was a fifth of its CPU per call.
 */
export interface HotRoutes {
  /**
   * Which requests take this chain, from their method and URL (path and query), before any middleware:
   * only methods the router has a route for.
   */
  matches(method: string | undefined, url: string | undefined): boolean;
  /** Middleware between the core's and the router (e.g. authentication, as in the app's chain). */
  middleware: readonly Koa.Middleware[];
  router: Router;
}

export interface HttpApp {
  app: Koa;
  metrics: HttpMetrics;
  /** The request listener of the service: its hot routes' chain, or the app's. */
  callback(): RequestListener;
}

/**
 * The one place a service's middleware is assembled, in this order: request id and log line,
 * metrics (served at `/metrics`), error shape, body parsing with a size limit, the service's middleware,
 * its routes; and the shorter chain of its hot routes.
 */
export function createHttpApp(options: HttpAppOptions): HttpApp {
  const metrics = new HttpMetrics(options.service);
  const coreApp = (): Koa => {
    const app = new Koa({ proxy: false });
    app.silent = true;
    app.use(requestContext(options.logger));
    app.use(metrics.middleware());
    app.use(errorHandler(options.logger));
    return app;
  };
  const app = coreApp();
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
  for (const router of options.routers) useRouter(app, router);
  const hot = options.hotRoutes;
  if (!hot) return { app, metrics, callback: () => app.callback() };
  const hotApp = coreApp();
  for (const middleware of hot.middleware) hotApp.use(middleware);
  // Routes only: a path none matches is a 404 from the error handler, and an unmatched method cannot
  // reach this chain.
  hotApp.use(hot.router.routes());
  return {
    app,
    metrics,
    callback: () => {
      const [served, hotServed] = [app.callback(), hotApp.callback()];
      return (req, res) => (hot.matches(req.method, req.url) ? hotServed : served)(req, res);
    },
  };
}

function useRouter(app: Koa, router: Router): void {
  app.use(router.routes());
  app.use(router.allowedMethods({ throw: true }));
}
